import gzip
import json
import sys
import types

import pandas as pd
import pytest

from cfbench.harness.errors import CfbenchError
from cfbench.harness.metrics import normalize
from cfbench.harness.paths import TASKS_DIR
from cfbench.harness.suite import load_suite
from cfbench.training.core import data as data_mod
from cfbench.training.core.data import TrainQuestion, load_train_set


def manifest_entry() -> dict:
    return json.loads((TASKS_DIR / "manifest.json").read_text())["train"]["search-r1"]


def test_the_bundled_set_matches_its_manifest_entry():
    questions = load_train_set("search-r1")
    entry = manifest_entry()
    assert len(questions) == entry["n"] == 10117
    assert {s: sum(q.source == s for q in questions) for s in ("nq", "hotpotqa")} == entry["per_source"] == {"nq": 10017, "hotpotqa": 100}
    assert entry["dropped"]["eval_overlap"] == {"nq": 5, "hotpotqa": 800}
    assert len({q.id for q in questions}) == len(questions)
    assert all(q.golden_answers and all(a.strip() for a in q.golden_answers) for q in questions)
    assert all(q.question == q.question.strip() and q.question.endswith("?") for q in questions)
    assert all(q.id.startswith(q.source + "-train/") for q in questions)


def test_no_training_question_is_asked_by_an_eval_suite():
    asked = {normalize(q.question) for name in ("fixed1325", "mini", "full") for q in load_suite(name).questions}
    assert not [q.id for q in load_train_set("search-r1") if normalize(q.question) in asked]


def test_sources_filter_keeps_order_and_refuses_unknown_sources():
    hotpot = load_train_set("search-r1", sources=("hotpotqa",))
    assert len(hotpot) == 100 and {q.source for q in hotpot} == {"hotpotqa"}
    assert len(load_train_set("search-r1", sources=("nq", "hotpotqa"))) == manifest_entry()["n"]
    with pytest.raises(CfbenchError, match=r"search-r1: no questions from source\(s\) triviaqa; its sources are nq, hotpotqa"):
        load_train_set("search-r1", sources=("triviaqa",))


def test_a_tampered_bundled_set_fails_its_hash_in_one_line(tmp_path, monkeypatch):
    (tmp_path / "train").mkdir()
    text = gzip.decompress((TASKS_DIR / "train" / "search-r1.jsonl.gz").read_bytes()).replace(b"?", b"!", 1)
    (tmp_path / "train" / "search-r1.jsonl.gz").write_bytes(gzip.compress(text))
    monkeypatch.setattr(data_mod, "TASKS_DIR", tmp_path)
    with pytest.raises(CfbenchError, match=r"search-r1.jsonl.gz: content hash \w+ does not match the manifest's \w+; restore") as err:
        load_train_set("search-r1")
    assert "\n" not in str(err.value)


def test_a_user_file_with_and_without_source(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(
        '{"id": "a", "question": "who?", "golden_answers": ["me", "I"]}\n\n'
        '{"id": "b", "question": "what?", "golden_answers": ["it"], "source": "nq"}\n'
    )
    assert load_train_set(str(path)) == [TrainQuestion("a", "mine", "who?", ("me", "I")), TrainQuestion("b", "nq", "what?", ("it",))]


def test_unknown_spec_names_the_bundled_sets():
    with pytest.raises(CfbenchError, match=r"unknown training set 'search-r2': not a bundled set \(search-r1, warmstart\)"):
        load_train_set("search-r2")


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """A stand-in huggingface_hub whose snapshot_download returns a local folder: tests never touch the network."""
    root = tmp_path / "snapshot"
    (root / "data").mkdir(parents=True)
    calls = []

    def snapshot_download(repo_id, repo_type, allow_patterns):
        calls.append((repo_id, repo_type, allow_patterns))
        return str(root)

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(snapshot_download=snapshot_download))
    return root, calls


def test_hub_parquet_in_search_r1_form(fake_hub):
    root, calls = fake_hub
    pd.DataFrame(
        {
            "id": ["train_0", "train_0", None],
            "question": ["who wrote hamlet", "which is older, a or b?", "q3?"],
            "golden_answers": [["Shakespeare", "William Shakespeare"], ["a"], None],
            "data_source": ["nq", "hotpotqa", "nq"],
            "reward_model": [{"ground_truth": {"target": ["x"]}}, {"ground_truth": {"target": ["a"]}}, {"ground_truth": {"target": ["c"]}}],
        }
    ).to_parquet(root / "data" / "train.parquet")
    pd.DataFrame({"question": ["not training"]}).to_parquet(root / "data" / "test.parquet")
    questions = load_train_set("hub:PeterJinGo/nq_hotpotqa_train", sources=("nq",))
    assert calls == [("PeterJinGo/nq_hotpotqa_train", "dataset", ["*train*.parquet"])]
    assert questions == [
        TrainQuestion("nq/train_0", "nq", "who wrote hamlet", ("Shakespeare", "William Shakespeare")),
        TrainQuestion("nq/row-2", "nq", "q3?", ("c",)),
    ]


def test_hub_parquet_without_the_columns_is_refused(fake_hub):
    root, _ = fake_hub
    pd.DataFrame({"prompt": ["p"], "answer": ["a"]}).to_parquet(root / "data" / "train.parquet")
    with pytest.raises(CfbenchError, match=r"hub:me/qa/data/train.parquet: columns \['prompt', 'answer'\] lack Search-R1's 'question'"):
        load_train_set("hub:me/qa")
