import json
import subprocess
import sys
from pathlib import Path

import pytest

from cfbench.harness import suite as suite_mod
from cfbench.harness.errors import CfbenchError
from cfbench.harness.metrics import BENCHMARKS
from cfbench.harness.paths import TASKS_DIR
from cfbench.harness.suite import load_suite

REPO = Path(__file__).resolve().parent.parent


def test_fixed1325_has_the_studys_composition():
    s = load_suite("fixed1325")
    assert len(s.questions) == 1325
    counts = {b: sum(q.benchmark == b for q in s.questions) for b in BENCHMARKS}
    assert counts == {"nq": 200, "triviaqa": 200, "popqa": 200, "hotpotqa": 200, "2wikimultihopqa": 200, "musique": 200, "bamboogle": 125}
    assert all(q.id.startswith(q.benchmark + "/") for q in s.questions)
    assert s.sha256 == json.loads((TASKS_DIR / "manifest.json").read_text())["suites"]["fixed1325"]["sha256"]


def test_mini_is_a_subset_of_fixed1325_which_is_a_subset_of_full():
    mini, fixed, full = (load_suite(n) for n in ("mini", "fixed1325", "full"))
    assert len(mini.questions) == 70
    fixed_rows = {q.id: q for q in fixed.questions}
    full_rows = {q.id: q for q in full.questions}
    assert all(fixed_rows[q.id] == q for q in mini.questions)
    assert all(full_rows[q.id] == q for q in fixed.questions)


def test_every_bundled_row_has_provenance_and_aliases():
    rows = [json.loads(line) for line in (TASKS_DIR / "suites" / "fixed1325.jsonl").read_text().splitlines()]
    assert all(r["source"] and all("file" in s and ("id" in s or "row" in s) for s in r["source"]) for r in rows)
    triviaqa = [r for r in rows if r["benchmark"] == "triviaqa"]
    assert sum(len(r["golden_answers"]) > 1 for r in triviaqa) > 150  # alias lists kept, not just the first answer


def test_builder_reproduces_the_shipped_files_byte_for_byte(tmp_path):
    sources, train_sources = REPO.parent / "shared" / "data" / "sources", REPO.parent / "shared" / "data" / "train_sources"
    assert sources.is_dir(), f"this test rebuilds tasks/ from {sources}: the project's reference data must sit beside the checkout"
    command = ["-m", "cfbench.tasks.build_data", "--sources", str(sources), "--train-sources", str(train_sources), "--out", str(tmp_path)]
    subprocess.run([sys.executable, *command], cwd=REPO, check=True)
    built, shipped = (json.loads((d / "manifest.json").read_text()) for d in (tmp_path, TASKS_DIR))
    owned = {"corpus": ["bundled"], "train": ["search-r1", "search-r1-answerable"]}  # build_warmstart owns the other entries
    shipped = {k: {n: v[n] for n in owned[k]} if k in owned else v for k, v in shipped.items()}
    assert built == shipped
    for rel in (
        "suites/fixed1325.jsonl",
        "suites/mini.jsonl",
        "suites/full.jsonl.gz",
        "corpus/bundled.jsonl.gz",
        "train/search-r1.jsonl.gz",
        "train/search-r1-answerable.jsonl.gz",
    ):
        assert (tmp_path / rel).read_bytes() == (TASKS_DIR / rel).read_bytes(), rel


def test_a_tampered_bundled_suite_fails_its_hash(tmp_path, monkeypatch):
    (tmp_path / "suites").mkdir()
    text = (TASKS_DIR / "suites" / "mini.jsonl").read_text().replace("?", "!", 1)
    (tmp_path / "suites" / "mini.jsonl").write_text(text)
    monkeypatch.setattr(suite_mod, "TASKS_DIR", tmp_path)
    with pytest.raises(CfbenchError, match=r"mini.jsonl: content hash .* does not match the manifest"):
        load_suite("mini")


def test_a_user_suite_in_flashrag_form(tmp_path):
    path = tmp_path / "myqa.jsonl"
    path.write_text(
        '{"id": "q1", "question": "who?", "golden_answers": ["me", "I"]}\n\n'
        '{"id": "q2", "question": "what?", "golden_answers": ["it"], "benchmark": "nq"}\n'
    )
    s = load_suite(str(path))
    assert s.name == "myqa" and [q.benchmark for q in s.questions] == ["myqa", "nq"]
    assert s.questions[0].golden_answers == ("me", "I")


def test_unknown_suite_names_the_bundled_ones():
    with pytest.raises(CfbenchError, match=r"unknown suite 'fixed1326'.*fixed1325, mini, full"):
        load_suite("fixed1326")
