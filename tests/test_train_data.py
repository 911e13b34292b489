import gzip
import json

import pytest

from cfbench.harness.errors import CfbenchError
from cfbench.harness.metrics import normalize
from cfbench.harness.paths import TASKS_DIR
from cfbench.harness.suite import Question, load_suite
from cfbench.training.core import data as data_mod
from cfbench.training.core.data import load_train_set


def manifest_entry() -> dict:
    return json.loads((TASKS_DIR / "manifest.json").read_text())["train"]["search-r1"]


def test_the_bundled_set_matches_its_manifest_entry():
    questions = load_train_set("search-r1")
    entry = manifest_entry()
    assert len(questions) == entry["n"] == 10055
    assert {s: sum(q.benchmark == s for q in questions) for s in ("nq", "hotpotqa")} == entry["per_source"] == {"nq": 9955, "hotpotqa": 100}
    assert entry["dropped"]["eval_overlap"] == {"nq": 5, "hotpotqa": 800}
    assert entry["dropped"]["near_duplicate"] == {"nq": 6, "hotpotqa": 0}  # the 6 pairs with fixed1325 NQ (tests/test_decontaminate.py)
    assert entry["dropped"]["answer_leak"] == {"nq": 56, "hotpotqa": 0}
    assert len({q.id for q in questions}) == len(questions)
    assert all(q.golden_answers and all(a.strip() for a in q.golden_answers) for q in questions)
    assert all(q.question == q.question.strip() and q.question.endswith("?") for q in questions)
    assert all(q.id.startswith(q.benchmark + "-train/") for q in questions)


def test_no_training_question_is_asked_by_an_eval_suite():
    asked = {normalize(q.question) for name in ("fixed1325", "mini", "full") for q in load_suite(name).questions}
    assert not [q.id for q in load_train_set("search-r1") if normalize(q.question) in asked]


def test_sources_filter_keeps_order_and_refuses_unknown_sources():
    hotpot = load_train_set("search-r1", sources=("hotpotqa",))
    assert len(hotpot) == 100 and {q.benchmark for q in hotpot} == {"hotpotqa"}
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
    assert load_train_set(str(path)) == [Question("a", "mine", "who?", ("me", "I")), Question("b", "nq", "what?", ("it",))]


def test_unknown_spec_names_the_bundled_sets():
    listed = r"\(search-r1, warmstart, search-r1-answerable, warmstart-proposer\)"
    with pytest.raises(CfbenchError, match=rf"unknown training set 'search-r2': not a bundled set {listed}"):
        load_train_set("search-r2")


def search_r1_record(i: int, source: str, question: str, answers: list[str] | None, target: list[str]) -> dict:
    """A row of Search-R1's nq_hotpotqa_train (scripts/data_process/qa_search_train_merge.py): FlashRAG's id, question
    and golden_answers, plus verl's data_source, chat prompt, ability, reward_model and extra_info."""
    return {
        "id": f"train_{i}",
        "question": question,
        "golden_answers": answers,
        "data_source": source,
        "prompt": [{"content": f"Answer the given question. ... Question: {question}\n", "role": "user"}],
        "ability": "fact-reasoning",
        "reward_model": {"ground_truth": {"target": target}, "style": "rule"},
        "extra_info": {"index": i, "split": "train"},
    }


@pytest.fixture
def offline_datasets(tmp_path, monkeypatch):
    """datasets and the hub client in offline mode with a private cache: nothing here reaches or leaves behind a hub download."""
    import datasets
    import huggingface_hub

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")
    root = tmp_path / "nq_hotpotqa_train"
    root.mkdir()
    return root


def write_parquet(path, rows):
    import datasets

    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_list(rows).to_parquet(str(path))


def test_dataset_in_search_r1_layout(offline_datasets):
    root = offline_datasets
    write_parquet(
        root / "train.parquet",
        [
            search_r1_record(0, "nq", "who wrote hamlet", ["Shakespeare", "William Shakespeare"], ["x"]),
            search_r1_record(0, "hotpotqa", "which is older, a or b?", ["a"], ["a"]),
            search_r1_record(2, "nq", "q3?", None, ["c"]),  # no golden_answers: reward_model's target stands in
        ],
    )
    (root / "test.parquet").write_text("not parquet: the test split is never read")
    assert load_train_set(str(root), sources=("nq",)) == [
        Question("nq/train_0", "nq", "who wrote hamlet", ("Shakespeare", "William Shakespeare")),
        Question("nq/train_2", "nq", "q3?", ("c",)),
    ]
    assert [q.id for q in load_train_set(str(root))] == ["nq/train_0", "hotpotqa/train_0", "nq/train_2"]


def test_dataset_of_json_lines_shards_with_reward_model_only(offline_datasets):
    root = offline_datasets
    for shard, (source, question, answer) in enumerate([("nq", "who?", "me"), ("hotpotqa", "what?", "it")]):
        record = search_r1_record(0, source, question, None, [answer])
        del record["golden_answers"], record["id"]
        (root / "data").mkdir(exist_ok=True)
        (root / "data" / f"train-0000{shard}-of-00002.jsonl").write_text(json.dumps(record) + "\n")
    assert load_train_set(str(root)) == [
        Question("nq/row-0", "nq", "who?", ("me",)),
        Question("hotpotqa/row-0", "hotpotqa", "what?", ("it",)),
    ]


def test_dataset_problems_are_one_line_errors(offline_datasets):
    root = offline_datasets
    write_parquet(root / "data" / "train.parquet", [{"prompt": "p", "answer": "a"}])
    with pytest.raises(
        CfbenchError, match=r"nq_hotpotqa_train/data/train.parquet: columns \['prompt', 'answer'\] lack Search-R1's 'question'"
    ):
        load_train_set(str(root))
    write_parquet(
        root / "data" / "train.parquet", [search_r1_record(0, "nq", "who?", ["me"], ["me"]), search_r1_record(1, "nq", "what?", [" "], [])]
    )
    with pytest.raises(CfbenchError, match=r"nq_hotpotqa_train/data/train.parquet row 1: field 'golden_answers' must be a non-empty list"):
        load_train_set(str(root))
    (root / "data" / "train.parquet").rename(root / "data" / "test.parquet")
    with pytest.raises(
        CfbenchError, match=r"nq_hotpotqa_train: the dataset has no train split \(its splits: test\); name its training file train.parquet"
    ):
        load_train_set(str(root))


def test_hub_dataset_offline_is_a_one_line_error_not_a_download(offline_datasets):
    with pytest.raises(CfbenchError) as caught:
        load_train_set("hub:PeterJinGo/nq_hotpotqa_train")
    message = str(caught.value)
    assert message.startswith("hub:PeterJinGo/nq_hotpotqa_train: cannot open the dataset (") and "\n" not in message
    assert message.endswith("; check the dataset id and network access")
