"""The warm-start data and the training-source corpus: training data only and grounded (their builder: test_data_builders.py)."""

import gzip
import hashlib
import json

import pytest

from cfbench.harness.metrics import normalize
from cfbench.harness.paths import TASKS_DIR
from cfbench.tasks.build_warmstart import contamination, evaluation_side

MANIFEST = json.loads((TASKS_DIR / "manifest.json").read_text())


def _rows(entry: dict) -> list[dict]:
    return [json.loads(line) for line in gzip.decompress((TASKS_DIR / entry["file"]).read_bytes()).decode("utf-8").splitlines()]


@pytest.fixture(scope="module")
def corpus():
    return _rows(MANIFEST["corpus"]["train-sources"])


@pytest.fixture(scope="module")
def trajectories():
    return _rows(MANIFEST["train"]["warmstart"])


@pytest.mark.parametrize("entry", [("corpus", "train-sources"), ("train", "warmstart")])
def test_shipped_files_match_their_manifest_hash(entry):
    spec = MANIFEST[entry[0]][entry[1]]
    assert hashlib.sha256(gzip.decompress((TASKS_DIR / spec["file"]).read_bytes())).hexdigest() == spec["sha256"]


def test_no_evaluation_question_evidence_or_title_in_the_training_data(corpus, trajectories):
    assert contamination(corpus, trajectories) == []
    eval_ids = set()
    for name in ("fixed1325.jsonl", "mini.jsonl"):
        eval_ids |= {json.loads(line)["id"] for line in (TASKS_DIR / "suites" / name).read_text().splitlines()}
    train_ids = {q["id"] for row in corpus for q in row["qa"]} | {row["id"].split(":", 1)[1] for row in trajectories}
    assert not train_ids & eval_ids


def test_the_check_catches_one_evaluation_evidence_passage_or_question(corpus, trajectories):
    evidence = {e for line in (TASKS_DIR / "suites" / "fixed1325.jsonl").read_text().splitlines() for e in json.loads(line)["evidence_ids"]}
    bundled = gzip.open(TASKS_DIR / "corpus" / "bundled.jsonl.gz", "rt", encoding="utf-8")
    leaked = next(row for row in map(json.loads, bundled) if row["id"] in evidence)
    found = contamination([*corpus[:50], {"id": "leak", "contents": leaked["contents"], "qa": []}], [])
    assert found and all(f.startswith("leak:") for f in found)
    asked = json.loads((TASKS_DIR / "suites" / "mini.jsonl").read_text().splitlines()[0])["question"]
    row = dict(trajectories[0], prompt=f"... Question: {asked}\n", id="single:leak")
    assert contamination([], [row]) == [f"single:leak: asks evaluation question {asked.strip()!r}"]


def test_solver_trajectories_are_grounded_and_follow_protocol_v1(trajectories):
    kinds = {row["kind"] for row in trajectories}
    assert {"single", "reformulate", "two-hop", "propose-1", "propose-2"} <= kinds
    for row in trajectories:
        turns = row["turns"]
        assert turns[-1]["observation"] == ""
        for turn in turns[:-1]:
            assert turn["generated"].endswith("</search>") and turn["observation"].startswith("\n\n<information>")
        if row["role"] == "solver":
            assert turns[-1]["generated"].endswith(f"<answer> {row['answer']} </answer>")
            assert any(f" {normalize(row['answer'])} " in f" {normalize(t['observation'])} " for t in turns), row["id"]
        else:
            assert "<question>" in turns[-1]["generated"] and turns[-1]["generated"].endswith("</answer>")
    searches = {kind: {len(r["turns"]) - 1 for r in trajectories if r["kind"] == kind} for kind in kinds}
    assert searches == {"single": {1}, "reformulate": {2}, "two-hop": {2}, "propose-1": {0}, "propose-2": {1}}
    # Real observations: some are cut at the 500-token cap and lose their closing tag.
    assert any(not t["observation"].rstrip().endswith("</information>") for r in trajectories for t in r["turns"][:-1])


def test_evaluation_side_sees_every_suite_question():
    questions, titles, _ = evaluation_side()
    assert len(questions) >= 28_000 and len(titles) > 1_000
