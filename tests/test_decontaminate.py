"""Training questions against fixed1325 (tasks/decontaminate.py) and the answerable training set's filter (tasks/build_data.py)."""

import json
import re

import pytest

from cfbench.harness import jsonl
from cfbench.harness.corpus import load_corpus
from cfbench.harness.paths import TASKS_DIR
from cfbench.harness.retrievers.index import build_index, open_index
from cfbench.harness.suite import load_suite
from cfbench.tasks.build_data import build_answerable, build_train, without_answer_leaks
from cfbench.tasks.decontaminate import answer_leaks, answerable, contaminated_pairs

HELD_OUT = [
    "who wrote the song to make you feel my love",
    "who has the most followers in the world on instagram",
    "where does the last name hidalgo come from",
]


def test_exact_normalised_and_near_duplicates_are_found_and_named():
    train = [
        "who wrote the song to make you feel my love",  # exact
        "Who wrote the song, To Make You Feel My Love?",  # normalised
        "Who got the most followers on instagram in the world?",  # near: 8 of 10 words shared
        "Where does the last name carson come from?",  # 7 of 9 words: 0.78, below the threshold
        "What is the capital of France?",
    ]
    pairs = contaminated_pairs(train, HELD_OUT)
    assert [(p.train, p.held_out, p.kind) for p in pairs] == [(0, 0, "exact"), (1, 0, "normalised"), (2, 1, "near")]
    assert pairs[2].jaccard == 0.8
    assert contaminated_pairs(train[3:4], HELD_OUT, threshold=0.75)[0].jaccard == 0.7778


def test_questions_that_normalise_to_nothing_are_duplicates_of_each_other():
    assert [(p.train, p.kind) for p in contaminated_pairs(["The?", "who"], ["the", "a"])] == [(0, "normalised"), (0, "normalised")]


def test_an_answer_leak_needs_the_evidence_passage_and_the_same_answer():
    held_out = [(["Bob Dylan"], ["7", "9"]), (["Paris"], ["3"])]
    train_answers = [["bob dylan"], ["Bob Dylan"], ["Adele"], ["The"]]
    retrieved = [["1", "9"], ["1", "2"], ["7"], ["3"]]
    # 0: retrieves passage 9, an evidence of the Bob Dylan question, and answers Bob Dylan; 1: same answer, no evidence;
    # 2: evidence, different answer; 3: an answer that normalises to nothing never matches
    assert answer_leaks(train_answers, retrieved, held_out) == [0]


def test_answerable_is_cover_em_over_the_passages_read_together():
    passages = ['"Bob Dylan"\nMake You Feel My Love was written by Bob Dylan.', '"Adele"\nAdele covered it.']
    assert answerable(["dylan, bob", "Bob Dylan"], passages)
    assert not answerable(["Dylan Thomas"], passages)
    assert not answerable(["lan"], passages)  # whole words only


def test_build_train_drops_near_duplicates_of_fixed1325_and_counts_them():
    candidates = [
        ("nq", {"file": "nq.json", "row": 0}, "Who wrote make you feel my love song?", ["Bob Dylan"]),
        ("nq", {"file": "nq.json", "row": 1}, "what is the capital of france", ["Paris"]),
        ("hotpotqa", {"file": "train_sources/hotpotqa/ecm_x.jsonl", "row": 0}, "Who wrote the song make you feel my love?", ["Bob Dylan"]),
        ("nq", {"file": "nq.json", "row": 2}, "What is the capital of France?", ["Paris"]),
    ]
    rows, dropped = build_train(candidates, eval_questions=[], fixed_questions=HELD_OUT)
    assert [r["id"] for r in rows] == ["nq-train/row-1"]
    assert dropped["near_duplicate"] == {"nq": 1, "hotpotqa": 1} and dropped["repeat"] == {"nq": 1, "hotpotqa": 0}


def test_build_answerable_keeps_covered_questions_and_drops_answer_leaks(tmp_path):
    passages = [
        {"id": "p0", "contents": '"Make You Feel My Love"\nMake You Feel My Love is a song written by Bob Dylan in 1997.'},
        {"id": "p1", "contents": '"Paris"\nParis is the capital and largest city of France.'},
        {"id": "p2", "contents": '"Danube"\nThe Danube flows through Vienna and Budapest to the Black Sea.'},
    ]
    path = tmp_path / "corpus.jsonl"
    jsonl.write_jsonl(path, passages)
    retriever = open_index(build_index(path, "bm25", tmp_path / "index"), load_corpus(path))
    rows = [
        {"source": "nq", "question": "what is the capital of france?", "golden_answers": ["Paris"]},
        {"source": "nq", "question": "where does the danube flow?", "golden_answers": ["Atlantic Ocean"]},
        {"source": "hotpotqa", "question": "who wrote the song make you feel my love?", "golden_answers": ["Bob Dylan"]},
    ]
    fixed = [{"golden_answers": ["Bob Dylan"], "evidence_ids": ["p0"]}]
    kept, counts = build_answerable(rows, retriever, fixed, k=1)
    assert [r["question"] for r in kept] == ["what is the capital of france?"]
    assert counts == {
        "candidates": {"nq": 2, "hotpotqa": 1},
        "answerable": {"nq": 1, "hotpotqa": 1},
        "answer_leak": {"nq": 0, "hotpotqa": 1},
        "kept": {"nq": 1, "hotpotqa": 0},
    }
    # the full mix (search-r1) keeps unanswerable questions and drops only the leak
    assert without_answer_leaks(rows, retriever, fixed, k=1) == (rows[:2], {"nq": 0, "hotpotqa": 1})


def _questions(name: str, entry: dict) -> list[str]:
    """The questions a shipped training file asks: rows' `question`, or (warm start) the solver prompt's and the proposer's."""
    rows = jsonl.read_verified(TASKS_DIR / entry["file"], entry["sha256"])
    out = []
    for _, row in jsonl.iter_rows(TASKS_DIR / entry["file"], rows):
        if "question" in row:
            out.append(row["question"])
        elif row["role"] == "solver":
            out.append(row["prompt"].rsplit("Question: ", 1)[1])
        else:
            out.append(re.search(r"<question>(.*?)</question>", row["turns"][-1]["generated"], re.DOTALL).group(1))
    return out


SHIPPED = json.loads((TASKS_DIR / "manifest.json").read_text())["train"]


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_no_shipped_training_file_holds_a_fixed1325_question_or_a_near_duplicate(name):
    fixed = [q.question for q in load_suite("fixed1325").questions]
    pairs = contaminated_pairs(_questions(name, SHIPPED[name]), fixed)
    assert pairs == [], f"{name}: {pairs[:3]}"


def test_the_answerable_set_records_its_filter_and_counts():
    entry = SHIPPED["search-r1-answerable"]
    assert entry["filter"]["k"] == 3 and entry["filter"]["retriever"] == "bm25"
    assert sum(entry["per_source"].values()) == entry["n"] and all(entry["per_source"].values())  # both sources of the mix
    assert all(entry["per_source"][s] == entry["answerable"][s] - entry["dropped"]["answer_leak"][s] for s in entry["per_source"])


@pytest.mark.parametrize("name", ["search-r1-answerable"])
def test_the_answerable_set_leaks_no_fixed1325_answer_and_every_question_is_answerable(name, bm25):
    entry = SHIPPED[name]
    rows = [row for _, row in jsonl.iter_rows(TASKS_DIR / entry["file"], jsonl.read_verified(TASKS_DIR / entry["file"], entry["sha256"]))]
    hits = bm25.search([r["question"] for r in rows], entry["filter"]["k"])
    suite = TASKS_DIR / "suites" / "fixed1325.jsonl"  # the suite's own rows: Question holds no evidence ids
    fixed = [(row["golden_answers"], row["evidence_ids"]) for _, row in jsonl.iter_rows(suite, jsonl.read_bytes(suite))]
    assert answer_leaks([r["golden_answers"] for r in rows], [[h.id for h in hs] for hs in hits], fixed) == []
    assert all(answerable(r["golden_answers"], [h.contents for h in hs]) for r, hs in zip(rows, hits))
