"""leaderboards/fixed1325/STUDY.md's generated tables are what the committed records give, regenerated here by the
script that writes them (leaderboards/fixed1325/study/tables.py), with the leaderboard's own statistics."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "leaderboards" / "fixed1325" / "study" / "tables.py"


def _tables():
    spec = importlib.util.spec_from_file_location("study_tables", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_study_tables_are_regenerated_from_the_records():
    tables = _tables()
    text = (REPO / "leaderboards" / "fixed1325" / "STUDY.md").read_text(encoding="utf-8")
    generated = tables.blocks()
    assert set(generated) == {
        "results",
        "orderings",
        "round3",
        "cost",
        "replay",
        "status",
        "checks",
        "judges",
        "changes",
        "admissions",
        "pooled",
        "training",
        "search_r1",
    }
    assert tables.render(text, generated) == text
    # A number edited by hand in a generated table is put back; the corrected claim stays corrected.
    edited = text.replace("| Dr. Zero | 1 | 13.0 [11.3, 14.7] |", "| Dr. Zero | 1 | 13.5 [11.3, 14.7] |", 1)
    assert edited != text and tables.render(edited, generated) == text
    assert "steps 40-43: wall (rollout + update), CPU time | 2,142 s, 1,542 s (step 43 alone: 726 s, 486 s) |" in text
    assert "| Search-R1 - warm start, 2WikiMultihopQA Cover-EM (p) | +4.5 [+0.5, +9.0] (0.046) |" in text


def test_the_script_checks_the_committed_file_from_the_command_line():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], cwd=REPO, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr


def test_the_committed_judge_agreement_is_what_compare_judges_gives(monkeypatch):
    from click.testing import CliRunner

    from cfbench.cli import main

    monkeypatch.chdir(REPO)
    study = "leaderboards/fixed1325/study"
    runs = [f"{study}/{run}" for run in ("dr-zero", "msv", "crossfit", "msv-crossfit")]
    result = CliRunner().invoke(main, ["audit", "compare-judges", *runs, "--judge", "reference", "--judge", "sheet:llm-annotators"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (REPO / study / "audit-sheet" / "reference-vs-sheet.md").read_text(encoding="utf-8")


def test_the_pilot_sections_are_what_their_scripts_write_from_the_records():
    """STUDY.md's pilot tables (Search-R1, its whole run, its learning rates, CrossFit and the self-evolution runs:
    compare.py; the proposer's start: proposer_probe.py; the training-set probe: train_probe.py) are the scripts'
    output on the committed records, verbatim."""
    pilots = REPO / "leaderboards" / "fixed1325" / "study" / "pilots"
    text = (REPO / "leaderboards" / "fixed1325" / "STUDY.md").read_text(encoding="utf-8")
    sections_written = {"compare.py": 5, "proposer_probe.py": 1, "train_probe.py": 1}
    for command in (["compare.py", "--print"], ["proposer_probe.py", "table", "--print"], ["train_probe.py", "report", "--print"]):
        result = subprocess.run([sys.executable, *command], cwd=pilots, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        sections = re.findall(r"<!-- [^>]*: begin .*?<!-- [^>]*: end -->", result.stdout, flags=re.DOTALL)
        assert len(sections) == sections_written[command[0]]
        assert all(section in text for section in sections), command
