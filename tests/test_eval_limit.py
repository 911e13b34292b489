"""`cfbench eval --limit N` (issue 39): the first N questions of each benchmark, recorded in the run; limited runs compare
with each other, never with whole-suite runs, and never go on a leaderboard. One real run drives the command end to end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cfbench.cli import main
from cfbench.harness.errors import CfbenchError
from cfbench.harness.metrics import BENCHMARKS
from cfbench.harness.suite import first_per_benchmark, load_suite
from cfbench.leaderboard.store import load_run
from leaderboard_runs import SUITE, question_ids, write_run

REPO = Path(__file__).resolve().parent.parent
ACCURACY = {"nq": 0.45, "triviaqa": 0.6, "popqa": 0.35, "hotpotqa": 0.3, "2wikimultihopqa": 0.3, "musique": 0.1, "bamboogle": 0.2}


def test_the_limit_keeps_the_first_n_of_each_benchmark_in_file_order():
    mini = load_suite("mini")
    cut = first_per_benchmark(mini, 2)
    assert [q.id for q in cut.questions] == [
        q.id for q in mini.questions if [x.id for x in mini.questions if x.benchmark == q.benchmark].index(q.id) < 2
    ]
    assert sorted({q.benchmark for q in cut.questions}) == sorted(BENCHMARKS) and len(cut.questions) == 14
    assert (cut.name, cut.sha256, cut.limit) == (mini.name, mini.sha256, 2)  # the file is still the suite's identity
    assert first_per_benchmark(mini, 10**6).questions == mini.questions
    with pytest.raises(CfbenchError, match="at least 1"):
        first_per_benchmark(mini, 0)


def _limited(path: Path, limit: int, seed: int, model: str) -> Path:
    return write_run(path, ACCURACY, seed=seed, model=model, suite={**SUITE, "limit": limit}, ids=question_ids(limit))


def test_runs_of_the_same_limit_compare_and_a_whole_suite_run_does_not(tmp_path):
    a, b = _limited(tmp_path / "a", 5, 1, "a"), _limited(tmp_path / "b", 5, 2, "b")
    other = _limited(tmp_path / "c", 4, 3, "c")
    whole = write_run(tmp_path / "whole", ACCURACY, seed=4, per_benchmark=5)
    runner = CliRunner()
    ok = runner.invoke(main, ["compare", str(a), str(b)], terminal_width=200)
    assert ok.exit_code == 0, ok.output
    assert "7-avg" in ok.output
    for against, said in ((other, "suite.limit: 5 vs 4"), (whole, "suite.limit: 5 vs absent")):
        refused = runner.invoke(main, ["compare", str(a), str(against)], terminal_width=400)
        assert refused.exit_code == 2 and said in refused.output and len(refused.output.strip().splitlines()) == 1


def test_a_limited_run_is_never_added_to_a_leaderboard(tmp_path):
    run = _limited(tmp_path / "run", 2, 1, "m")
    root = tmp_path / "leaderboards"
    result = CliRunner().invoke(main, ["leaderboard", "add", str(run), "--root", str(root)], terminal_width=400)
    assert result.exit_code == 2
    [line] = result.output.strip().splitlines()
    assert "--limit 2" in line and "cannot go on a leaderboard" in line and "whole suite" in line
    assert not root.exists()  # a refused command leaves nothing behind


def test_eval_limit_2_runs_end_to_end_quietly_and_records_the_limit(tmp_path, tiny_llama):
    """`cfbench eval --limit 2`: 14 mini questions through a real (tiny, randomly initialised) model and the bundled BM25
    index, as a subprocess whose stderr is a pipe, as under CI or nohup.

    Its output is cfbench's own: the two loading lines, the progress, then the table; no third-party notice and no
    "Loading weights" bar, which from_pretrained prints without the entry point's settings (tests/test_quiet_output.py)."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "TRANSFORMERS_VERBOSITY", "TRANSFORMERS_NO_ADVISORY_WARNINGS", "PYTHONWARNINGS"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-m", "cfbench.cli", "eval", "--ckpt", str(tiny_llama), "--suite", "mini", "--limit", "2"]
        + ["--max-new-tokens", "16", "--threads", "1", "--out", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr
    record = json.loads((out / "results.json").read_text())
    assert record["suite"]["limit"] == 2 and record["suite"]["n"] == 14 and record["scores"]["avg7"]["n"] == 14
    assert json.loads((out / "run.json").read_text())["suite"]["limit"] == 2
    lines = done.stderr.strip().splitlines()
    assert lines[:2] == ["loading index (bm25) ...", f"loading model ({tiny_llama}, hf) ..."]
    assert "Warning" not in done.stderr and "Loading weights" not in done.stderr and "it/s" not in done.stderr, done.stderr
    table = done.stdout
    assert "first 2 per benchmark: not for a leaderboard" in " ".join(table.split())
    rows = {cells[1].strip(): cells[2:-1] for cells in (line.split("│") for line in table.splitlines()) if len(cells) == 8}
    assert list(rows) == [*BENCHMARKS, "avg7", "multi_hop", "single_hop"]  # the leaderboard's order
    assert rows["avg7"][0].strip() == "14" and rows["avg7"][2].strip().startswith("[") and rows["avg7"][3].strip().endswith("%")


def test_a_leaderboard_build_refuses_a_limited_entry_copied_in_by_hand(tmp_path):
    run = _limited(tmp_path / "run", 2, 1, "m")
    root = tmp_path / "leaderboards"
    shutil.copytree(run, root / "fixed1325" / "runs" / load_run(run).id)
    result = CliRunner().invoke(main, ["leaderboard", "build", "--root", str(root)], terminal_width=400)
    assert result.exit_code == 2 and "cannot go on a leaderboard" in result.output
    assert not (root / "fixed1325" / "README.md").exists()
