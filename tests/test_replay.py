"""Fixed-bank replay for real: feedback solvers (the tiny random Llama of conftest.py) trained on a small saved bank,
judged by gold answers.

The bank (tests/audit_runs.py's labelled corpus) is drawn from solver steps round by round: s2-t0 from
`paris` (fold 1), s2-t1 from `everest` (round 1), s4-t0 from `nile` (round 2), s6-t0 from `moon`
(round 3; all fold 0), in batches of 2. Only the feedback solver's provenance differs between
variants, and what each scorer had trained on is checked from the record. The run's checkpoint-6 is
the coupled variant's main solver, whose recorded provenance holds every bank source.
"""

import json
import shutil

import pytest

from cfbench.harness.errors import CfbenchError
from cfbench.training.audit import replay as replay_mod
from cfbench.training.audit.audit import CACHE_FILE, audit_run
from cfbench.training.audit.judge import AnswersWaiting, GoldJudge, judge_for
from cfbench.training.audit.replay import replay
from cfbench.training.core.answers import matches
from tests.audit_runs import make_run, row

pytestmark = pytest.mark.slow  # Every test here replays a bank by training a (tiny) solver.

BANK = {
    1: [row(1, 1, 0, "nile", "south", [], "Which way does the Nile flow?")],  # a proposer step: its label trained nobody
    2: [
        row(2, 1, 0, "paris", "Paris", [], "Which city is the capital of France?"),
        row(2, 1, 1, "everest", "8000 metres", [], "How high is Mount Everest?"),
        row(2, 1, 2, "moon", None, []),
    ],  # rejected: not in the bank
    4: [
        row(
            4,
            2,
            0,
            "nile",
            "north",
            [],
            "Which way does the Nile flow?",
            evidence=[{"id": "delta", "contents": '"Delta"\nThe delta is in Egypt.'}],
        ),
        row(4, 2, 1, "paris", "Lyon", [], "Where is the Louvre?"),
    ],  # round 2's second: the first N would take it
    6: [row(6, 3, 0, "moon", "Apollo 11", [], "Which mission landed on the Moon?")],
}
SMALL = {
    "samples_per_prompt": 2,
    "prompts_per_step": 2,
    "micro_batch": 4,
    "knobs": {"topk": 1, "max_searches": 1, "max_new_tokens": 16, "max_obs_tokens": 32, "max_context_tokens": 1024},
}
VARIANTS = ["coupled", "source-id", "same-source", "full-data", "half-budget"]
BANK_IDS = ["s2-t0", "s2-t1", "s4-t0", "s6-t0"]


@pytest.fixture(scope="module")
def replayed(tmp_path_factory, tiny_llama):
    tmp = tmp_path_factory.mktemp("replay")
    run = make_run(tmp / "run", "dr-zero", cases=BANK, overrides=SMALL | {"model": str(tiny_llama)})
    shutil.copytree(tiny_llama, run / "checkpoint-6")
    trained = {"folds": [0, 1], "sources": ["everest", "moon", "nile", "paris"]}
    (run / "checkpoint-6" / "cfbench_train.json").write_text(json.dumps({"step": 6, "provenance": {"main": trained}}))
    return run, tmp / "out", replay(run, 4, VARIANTS, GoldJudge(run / "corpus.jsonl"), tmp / "out", epochs=1)


@pytest.mark.slow
def test_provenance_of_each_feedback_variant(replayed):
    _, out, summary = replayed
    v = summary["variants"]
    assert [json.loads(x)["task_id"] for x in (out / "bank.jsonl").read_text().splitlines()] == BANK_IDS  # every round, solver steps only
    shares = {name: r["scorer_trained_on_source"] for name, r in v.items()}
    assert shares == {"coupled": 1.0, "same-source": 1.0, "full-data": 1.0, "source-id": 0.0, "half-budget": 0.0}
    # source-id: every question is scored by the solver trained on the other fold, which never saw its source
    assert v["source-id"]["updates"] == {"aux-0": 2, "aux-1": 1} and v["full-data"]["updates"] == {"aux-all": 2}
    assert v["half-budget"]["updates"] == {"aux-0": 1, "aux-1": 1} and v["coupled"]["updates"] == {"main": 0}  # trained in the run only
    for variant, scorers in (
        ("source-id", {"s2-t0": "aux-0", "s2-t1": "aux-1", "s4-t0": "aux-1", "s6-t0": "aux-1"}),
        ("coupled", dict.fromkeys(BANK_IDS, "main")),
    ):
        rows = json.loads((out / f"{variant}.json").read_text())["judged"]
        assert {q["task_id"]: q["scorer"] for q in rows} == scorers


@pytest.mark.slow
def test_false_agreement_counted_from_the_judged_answers(replayed):
    _, out, summary = replayed
    for variant in VARIANTS:
        result = json.loads((out / f"{variant}.json").read_text())
        pairs = [
            (q["label"]["correct"], x["correct"], matches(x["prediction"], q["adopted_label"]))
            for q in result["judged"]
            if q["label"]
            for x in q["responses"]
        ]
        assert len(pairs) == result["resolved_pairs"] == 4 and result["pairs"] == 8  # nile and moon have no gold in their source
        assert result["T_P"] == 0.5  # Paris right, 8000 metres wrong: the labels are the bank's, whatever the solver
        assert result["F"] == sum(agree and not lab and not res for lab, res, agree in pairs) / 4
        assert summary["variants"][variant]["F"] == result["F"]
    assert "| source-id |" in (out / "replay.md").read_text()


@pytest.mark.slow
def test_trained_variants_are_kept_on_rerun(replayed, tmp_path, monkeypatch):
    run, out, summary = replayed

    def no_training(*args):
        raise AssertionError("a finished variant was trained again")

    monkeypatch.setattr(replay_mod, "feedback", no_training)
    assert replay(run, 4, VARIANTS[:2], GoldJudge(run / "corpus.jsonl"), out, epochs=1)["variants"] == {
        k: summary["variants"][k] for k in VARIANTS[:2]
    }
    # a clone elsewhere (another machine's checkout) keeps them too
    moved, moved_out = shutil.copytree(run, tmp_path / "run"), shutil.copytree(out, tmp_path / "out")
    assert replay(moved, 4, VARIANTS[:2], GoldJudge(moved / "corpus.jsonl"), moved_out, epochs=1)["variants"] == {
        k: summary["variants"][k] for k in VARIANTS[:2]
    }


@pytest.mark.slow
def test_bank_errors(replayed):
    run, out, _ = replayed
    with pytest.raises(CfbenchError, match=r"--bank 6 asks for more questions than the run admitted in solver steps \(5\); pass --bank 5"):
        replay(run, 6, ["source-id"], GoldJudge(run / "corpus.jsonl"), out, epochs=1)
    with pytest.raises(CfbenchError, match="holds another bank"):
        replay(run, 3, ["source-id"], GoldJudge(run / "corpus.jsonl"), out, epochs=1)


def _answer(sheet, answer) -> int:
    """Write answer(row) into every row of a sheet still waiting; returns how many."""
    rows = [json.loads(line) for line in sheet.read_text().splitlines()]
    for r in (waiting := [r for r in rows if r["output"] is None]):
        r["output"] = answer(r)
    sheet.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(waiting)


@pytest.mark.slow
def test_a_sheet_judge_reuses_the_audits_references_and_waits_without_training_again(replayed, tmp_path, monkeypatch):
    run = shutil.copytree(replayed[0], tmp_path / "run")
    audited = run / "judged" / "sheet-annotator"
    with pytest.raises(AnswersWaiting):  # the run's audit asks its references first
        audit_run(run, judge_for("sheet:annotator", run / "corpus.jsonl", audited / CACHE_FILE), audited)
    paris = "<quote>Paris is the capital of France.</quote><reference>Paris</reference>"

    def known(r):  # the Moon's reference is left for later
        return None if "Moon" in r["prompt"] else paris if "capital of France?" in r["prompt"] else "<reference>unresolved</reference>"

    assert _answer(audited / "sheet.jsonl", known)

    out = tmp_path / "replay"
    judge = judge_for("sheet:annotator", run / "corpus.jsonl", out / CACHE_FILE)
    judge.borrow([audited / "sheet.jsonl"])
    with pytest.raises(AnswersWaiting, match=f"judge prompts without an answer: 1, in {out / 'sheet.jsonl'}"):
        replay(run, 4, ["source-id"], judge, out, epochs=1)
    assert (out / "source-id.feedback.json").is_file() and not (out / "source-id.json").exists()
    rows = [json.loads(x) for x in (out / "sheet.jsonl").read_text().splitlines()]
    # the bank's questions ask the audit's own reference prompts, the Nile's with the proposer's passage
    assert [r.get("copied_from") for r in rows] == [str(audited / "sheet.jsonl")] * 3 + [None]
    assert '[P1] Retrieved passage: (Title: "Delta") The delta is in Egypt.' in rows[2]["prompt"] and "Moon" in rows[3]["prompt"]

    def no_training(*args):
        raise AssertionError("the feedback solvers were trained again")

    monkeypatch.setattr(replay_mod, "feedback", no_training)
    assert _answer(out / "sheet.jsonl", lambda r: "<reference>unresolved</reference>") == 1
    result = replay(run, 4, ["source-id"], judge_for("sheet:annotator", run / "corpus.jsonl", out / CACHE_FILE), out, epochs=1)
    source_id = result["variants"]["source-id"]
    assert (source_id["pairs"], source_id["resolved_pairs"], source_id["T_P"], source_id["T_S"]) == (8, 2, 1.0, 0.0)
