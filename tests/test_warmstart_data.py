"""The warm-start data and the training-source corpus: training data only and grounded (their builder: test_data_builders.py)."""

import gzip
import hashlib
import json
import re

import pytest

from cfbench.harness.metrics import normalize
from cfbench.harness.paths import TASKS_DIR
from cfbench.tasks.build_warmstart import contamination, evaluation_side
from cfbench.tasks.compose_two_hop import compose
from cfbench.training.selfevolve.proposer import parse

MANIFEST = json.loads((TASKS_DIR / "manifest.json").read_text())


def _rows(entry: dict) -> list[dict]:
    return [json.loads(line) for line in gzip.decompress((TASKS_DIR / entry["file"]).read_bytes()).decode("utf-8").splitlines()]


@pytest.fixture(scope="module")
def corpus():
    return _rows(MANIFEST["corpus"]["train-sources"])


@pytest.fixture(scope="module")
def trajectories():
    return _rows(MANIFEST["train"]["warmstart"])


@pytest.mark.parametrize("entry", [("corpus", "train-sources"), ("train", "warmstart"), ("train", "warmstart-proposer")])
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


def test_composition_replaces_the_bridge_entity_by_what_the_first_question_asks():
    q1 = "What was Chopin's most likely cause of death?"
    assert compose(q1, "tuberculosis", "What bacterium causes tuberculosis infection?", "Tuberculosis") == (
        "What bacterium causes Chopin's most likely cause of death infection?"
    )
    assert compose("Where did he live at 21?", "Paris", "What is the population of Paris?", "Paris") == (
        "X is the answer to: Where did he live at 21? What is the population of X?"
    )
    assert compose(q1, "tuberculosis", "What causes a cough?", "Tuberculosis") is None  # q2 must name the bridge
    assert compose("Which city is Paris?", "Paris", "Who founded Paris?", "Paris").startswith("X is the answer to:")  # q1 names it


def test_the_proposer_data_are_strict_2_hop_proposals_with_a_label_from_the_found_passage():
    rows = _rows(MANIFEST["train"]["warmstart-proposer"])
    assert {r["role"] for r in rows} == {"proposer"} and len([r for r in rows if r["kind"] == "compose-2"]) >= 300
    assert contamination([], rows) == []
    for row in rows:
        turns = [{"generated": t["generated"], "action": "search" if t["observation"] else "answer"} for t in row["turns"]]
        proposal = parse(turns, len(turns))
        assert not proposal.error and proposal.answer == row["answer"], row["id"]
        if row["kind"] != "propose-1":  # the label is a span of what the search found
            assert f" {normalize(row['answer'])} " in f" {normalize(row['turns'][0]['observation'])} ", row["id"]
        if row["kind"] == "compose-2":  # and a composition does not name what it searched: the bridge is the first hop
            searched = re.search(r"<search> (.*) </search>", row["turns"][0]["generated"]).group(1)
            assert f" {normalize(searched)} " not in f" {normalize(proposal.question)} ", row["id"]


def test_no_source_of_the_cpu_self_evolution_pool_is_a_source_of_the_proposer_data():
    """The proposer warm start never saw the passages self-evolution.cpu proposes from, so what it proposes there
    (the proposer pilot of STUDY.md, and every run) is not recalled from its supervised data."""
    from cfbench.harness.corpus import load_corpus
    from cfbench.training.selfevolve.sources import corpus_path, source_pool
    from cfbench.training.treatments import load_config

    config = load_config("dr-zero", "cpu")
    corpus = load_corpus(corpus_path(config))
    pool = [corpus.contents[j] for j in source_pool(corpus, config.source_pool, config.seed)]
    prompts = [r["prompt"] for r in _rows(MANIFEST["train"]["warmstart-proposer"])]
    assert len(pool) == 43 and not [c for c in pool if any(c.partition("\n")[2] in p for p in prompts)]
    assert any(c.partition("\n")[2] in prompts[0] for c in corpus.contents)  # the check finds a source that is there
