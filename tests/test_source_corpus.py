"""Self-evolution sources come from training data: the default corpus, the evaluation-corpus refusal,
and the reference judge on sources that carry their gold questions."""

import gzip
import json
import shutil

import pytest

from cfbench.harness.errors import CfbenchError
from cfbench.harness.paths import BUNDLED_CORPUS, TRAIN_SOURCES
from cfbench.training.audit.judge import GoldJudge
from cfbench.training.config.schema import to_json
from cfbench.training.selfevolve.sources import corpus_path
from cfbench.training.treatments import SELF_EVOLUTION, load_config


@pytest.mark.parametrize("scale", ["cpu-smoke", "paper"])
def test_every_self_evolution_config_draws_sources_from_the_training_corpus(scale):
    for treatment in SELF_EVOLUTION:
        config = load_config(treatment, scale)
        assert corpus_path(config) == TRAIN_SOURCES and "allow_eval_corpus" not in to_json(config)


def test_the_evaluation_corpus_is_refused_under_any_name_unless_allowed(tmp_path):
    copy = tmp_path / "renamed.jsonl.gz"
    shutil.copyfile(BUNDLED_CORPUS, copy)
    for corpus in (str(BUNDLED_CORPUS), "bundled", str(copy)):
        with pytest.raises(CfbenchError, match="are the evaluation corpus.*--allow-eval-corpus"):
            load_config("dr-zero", "cpu-smoke", corpus=corpus)
    assert load_config("msv", "cpu-smoke", corpus=str(copy), allow_eval_corpus=True).allow_eval_corpus is True
    with pytest.raises(CfbenchError, match="apply to the self-evolution treatments"):
        load_config("search-r1", "cpu-smoke", allow_eval_corpus=True)


def _audit_row(source_id: str, question: str) -> dict:
    return {
        "source_id": source_id,
        "question": question,
        "source": '"Notre Dame"\nA copper statue of Christ stands in front of '
        "the Main Building. The Grotto is a replica of the grotto at Lourdes.",
        "evidence": [],
    }


def test_reference_judge_answers_through_the_matching_gold_question(tmp_path):
    corpus = tmp_path / "sources.jsonl"
    qa = [
        {"id": "q1", "question": "What is in front of the Notre Dame Main Building?", "answers": ["a copper statue of Christ"]},
        {"id": "q2", "question": "What is the Grotto at Notre Dame a replica of?", "answers": ["the grotto at Lourdes"]},
    ]
    corpus.write_text(json.dumps({"id": "p1", "contents": '"Notre Dame"\ntext', "qa": qa}) + "\n")
    judge = GoldJudge(corpus)
    near, far = _audit_row("p1", "What stands in front of the Notre Dame Main Building?"), _audit_row("p1", "Who founded the university?")
    resolved, unresolved = judge.references([near, far])
    assert (resolved.status, resolved.answer) == ("resolved", "a copper statue of Christ")
    assert (unresolved.status, unresolved.reason) == ("unresolved", "no gold question on the source is like this one")
    right, wrong = judge.verdicts([(near, resolved, "copper statue of Christ"), (near, resolved, "the grotto at Lourdes")])
    assert (right.correct, wrong.correct) == (True, False)


def test_the_shipped_training_corpus_carries_gold_questions_for_the_judge():
    judge = GoldJudge(TRAIN_SOURCES)
    first = json.loads(gzip.open(TRAIN_SOURCES, "rt", encoding="utf-8").readline())
    assert (
        len(judge.qa) > 15_000
        and judge.golds_for({"source_id": first["id"], "question": first["qa"][0]["question"]}) == first["qa"][0]["answers"]
    )
