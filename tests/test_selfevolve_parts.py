"""The self-evolution pieces on constructed inputs: f(k), proposals, MSV, hop baselines, folds, routing, schedule."""

import json

import pytest
import torch

from cfbench.harness.corpus import Corpus
from cfbench.harness.errors import CfbenchError
from cfbench.training.config.choices import aux_updates_now
from cfbench.training.core.objective import group_advantages
from cfbench.training.selfevolve import crossfit, msv, proposer
from cfbench.training.selfevolve.loop import schedule
from cfbench.training.selfevolve.sources import FOLDS_FILE, Task, connected_groups, fold_of, pool_folds, source_pool, tasks_for_step
from cfbench.training.treatments import load_config


def test_difficulty_table():
    assert [proposer.difficulty(k) for k in range(6)] == [0.0, 1.0, 0.75, 0.5, 0.25, 0.0]
    assert proposer.reward(0.5, 1.0, 2) == pytest.approx(0.5 + 0.75)
    assert proposer.reward(0.5, 1.0, None) == 0.5  # well formed but never scored (not admitted)
    assert proposer.reward(0.5, 0.0, None) == 0.0


def turns(*generated: str) -> list[dict]:
    return [{"generated": g, "action": "search" if "<search>" in g else ("answer" if "<answer>" in g else "invalid")} for g in generated]


GOOD = "<question> Who wrote The Call of the Wild? </question> <answer> Jack London </answer>"


@pytest.mark.parametrize(
    "generated, hops, error",
    [
        ((GOOD,), 1, ""),
        (("<search> Buck </search>", GOOD), 2, ""),
        ((GOOD,), 2, "0 searches for a 2-hop task (needs 1)"),
        (("<search> Buck </search>", GOOD), 1, "1 searches for a 1-hop task (needs 0)"),
        (("<question> Who wrote it? </question>",), 1, "not exactly one"),
        ((GOOD + " " + GOOD,), 1, "not exactly one"),
        (("<answer> Jack London </answer> <question> Who? </question>",), 1, "not exactly one"),
        (("<question> Did Jack London write it? </question> <answer> Jack London </answer>",), 1, "the answer appears in the question"),
        (("<question> ? </question> <answer> London </answer>",), 1, "empty question or answer"),
    ],
)
def test_strict_parse(generated, hops, error):
    parsed = proposer.parse(turns(*generated), hops)
    assert (parsed.error == error) if not error else error in parsed.error
    if not error:
        assert (parsed.question, parsed.answer) == ("Who wrote The Call of the Wild?", "Jack London")


def test_graded_format_never_gives_a_malformed_proposal_full_marks():
    half = turns("<question> Who wrote it? </question> and then nothing")
    assert proposer.format_score("graded", half, proposer.parse(half, 1)) == 0.5
    assert proposer.format_score("strict", half, proposer.parse(half, 1)) == 0.0
    wrong_hops = turns(GOOD)
    assert proposer.format_score("graded", wrong_hops, proposer.parse(wrong_hops, 2)) == 0.75
    assert proposer.format_score("strict", turns(GOOD), proposer.parse(turns(GOOD), 1)) == 1.0


@pytest.mark.parametrize(
    "aware, blind, admitted, label",
    [
        (["Jack London", "jack london.", "Buck"], ["The Jack London", "Jack London", "Alaska"], True, "Jack London"),
        (["Jack London", "Jack London", "Buck"], ["Alaska", "Alaska", "Buck"], False, ""),  # majorities disagree
        (["Jack London", "Buck", "Alaska"], ["Jack London", "Jack London", "Jack London"], False, ""),  # no aware majority
        (["Buck", "Buck", "Buck"], ["Buck", "", ""], False, ""),  # empty answers never form a majority
        (["", "", ""], ["", "", ""], False, ""),
    ],
)
def test_msv_admission(aware, blind, admitted, label):
    verdict = msv.admit(aware, blind)
    assert (verdict.admitted, verdict.label) == (admitted, label)


def test_msv_majority_replaces_the_draft_label():
    assert msv.admit(["Jack London"] * 3, ["jack london"] * 2 + ["x"]).label == "Jack London"
    assert msv.majority(["x", "y", "z"]) is None and msv.majority(["y", "x", "X."]) == "x"


def test_proposer_baseline_is_over_tasks_of_the_same_hop_count():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25, 0.75, 0.3])
    hops = [1, 1, 2, 2, 2, 4]
    adv = group_advantages(rewards, hops)
    assert adv[:2].tolist() == pytest.approx([0.7071, -0.7071], abs=1e-4)
    two = torch.tensor([0.5, 0.25, 0.75])
    assert adv[2:5].tolist() == pytest.approx(((two - two.mean()) / (two.std() + 1e-6)).tolist(), abs=1e-6)
    assert adv[5] == 0.0  # the only 4-hop task has no same-hop baseline


def corpus(n: int = 40) -> Corpus:
    return Corpus(path=None, sha256="c" * 64, ids=tuple(f"doc{i}" for i in range(n)), contents=tuple(f'"T{i}"\ntext {i}' for i in range(n)))


def test_tasks_cycle_through_the_seeded_pool_with_hops_4_3_2_1():
    c = corpus()
    pool = source_pool(c, 8, seed=3)
    assert pool == source_pool(c, 8, seed=3) != source_pool(c, 8, seed=4)
    steps = [tasks_for_step(c, pool, s, 4, 3, [4, 3, 2, 1]) for s in range(1, 5)]
    assert [t.source_id for t in steps[0] + steps[1]] == [t.source_id for t in steps[2] + steps[3]]  # sources recur each pass
    assert steps[0] == tasks_for_step(c, pool, 1, 4, 3, [4, 3, 2, 1])  # the same draw again (resume)
    many = [t.hops for s in range(1, 2001) for t in tasks_for_step(c, pool, s, 5, 0, [4, 3, 2, 1])]
    shares = [many.count(n) / len(many) for n in (1, 2, 3, 4)]
    assert shares == pytest.approx([0.4, 0.3, 0.2, 0.1], abs=0.02)


def test_folds_are_per_source_decided_once_and_read_back(tmp_path):
    c = corpus()
    pool = source_pool(c, 0, seed=0)
    folds = pool_folds(c, pool, tmp_path, resume=False, tasks_per_round=120)
    assert folds == {i: fold_of(i) for i in c.ids} and set(folds.values()) == {0, 1}  # no two sources connected: a fold each
    stored = json.loads((tmp_path / FOLDS_FILE).read_text())
    assert stored["proposals_per_source"] == {"tasks_per_round": 120, "sources": 40, "min": 3, "max": 3} and stored["groups"] == {}
    stored["folds"]["doc0"] = 1 - folds["doc0"]  # what the run decided is what a resumed run uses
    (tmp_path / FOLDS_FILE).write_text(json.dumps(stored))
    assert pool_folds(c, pool, tmp_path, resume=True, tasks_per_round=120)["doc0"] == 1 - folds["doc0"]
    other = Corpus(None, "d" * 64, c.ids, c.contents)
    with pytest.raises(CfbenchError, match="was made for corpus c+, not d+"):
        pool_folds(other, pool, tmp_path, resume=True, tasks_per_round=120)


TEXT = (
    "quick brown fox jumps over lazy dog while farmer sleeps under old oak tree near river bank "
    "and his wife bakes bread for market day in small village by hills"
)


def test_connected_sources_share_a_fold(tmp_path):
    """Same title (any case) or near-duplicate text joins sources, transitively; a group takes its smallest id's fold."""
    rows = [
        ("b", '"Fox"\n' + TEXT),
        ("a", '"Other"\n' + TEXT.replace("old oak", "tall oak")),  # near-duplicate of b
        ("c", '"fox"\nsomething else entirely, about cats'),  # b's title
        ("d", '"Dog"\n' + TEXT[:40] + " and then a wholly different story about ships at sea for many days and nights"),
        *((f"x{i}", f'"T{i}"\ntext number {i} on its own') for i in range(12)),
    ]
    c = Corpus(None, "e" * 64, tuple(r[0] for r in rows), tuple(r[1] for r in rows))
    pool = source_pool(c, 0, seed=1)
    assert connected_groups(c, pool) == {"a": "a", "b": "a", "c": "a", "d": "d", **{f"x{i}": f"x{i}" for i in range(12)}}
    folds = pool_folds(c, pool, tmp_path, resume=False, tasks_per_round=32)
    assert folds["a"] == folds["b"] == folds["c"] == fold_of("a") != fold_of("c")  # by its own id, c would land in the other fold
    assert folds["d"] == fold_of("d")
    stored = json.loads((tmp_path / FOLDS_FILE).read_text())
    assert stored["groups"] == {"b": "a", "c": "a"} and stored["pool"] == [c.ids[i] for i in pool]
    assert stored["proposals_per_source"] == {"tasks_per_round": 32, "sources": 16, "min": 2, "max": 2}


def test_crossfit_routes_each_fold_to_the_other_folds_solver():
    task = Task("s1-t0", "doc3", "x", 1)
    for h in (0, 1):
        assert crossfit.scorer(h, True, "none") == f"aux-{1 - h}" and crossfit.trainers(h, True, "none") == ["main", f"aux-{h}"]
        assert crossfit.scorer(h, True, "same-source") == f"aux-{h}"
        assert crossfit.scorer(h, True, "full-data") == "aux-all" and crossfit.trainers(h, True, "full-data") == ["main", "aux-all"]
        assert crossfit.scorer(h, False, "none") == "main" and crossfit.trainers(h, False, "none") == ["main"]
    assert crossfit.fold(task, {"doc3": 1}, "none") == 1
    assert crossfit.fold(task, {"doc3": 1}, "random-split") == fold_of("s1-t0")
    assert [aux_updates_now("half", i) for i in range(4)] == [True, False, True, False]
    assert crossfit.solvers(True, "full-data") == ["main", "aux-all"] and crossfit.solvers(False, "none") == ["main"]


def test_schedule_rounds_of_proposer_then_solver_steps():
    config = load_config("dr-zero", "cpu-smoke") | {"proposer_steps": 2, "solver_steps": 3}
    assert [schedule(config, s) for s in range(1, 7)] == [
        (1, "proposer", 0),
        (1, "proposer", 1),
        (1, "solver", 0),
        (1, "solver", 1),
        (1, "solver", 2),
        (2, "proposer", 0),
    ]


def test_self_evolution_configs():
    for name, (with_msv, with_crossfit) in [
        ("dr-zero", (False, False)),
        ("msv", (True, False)),
        ("crossfit", (False, True)),
        ("msv-crossfit", (True, True)),
    ]:
        for scale in ("cpu-smoke", "paper"):
            config = load_config(name, scale)
            assert (config.treatment, config.msv, config.crossfit) == (name, with_msv, with_crossfit)
            assert config.steps == config.rounds * (config.proposer_steps + config.solver_steps)
    paper = load_config("dr-zero", "paper")
    assert (paper.rounds, paper.proposer_steps, paper.solver_steps, paper.steps) == (3, 18, 25, 129)
    assert load_config("crossfit", "cpu-smoke", control="random-split", aux_budget="half").aux_budget == "half"
    with pytest.raises(CfbenchError, match="need auxiliary solvers: use them with crossfit or msv-crossfit"):
        load_config("msv", "cpu-smoke", aux_budget="half")
    with pytest.raises(CfbenchError, match="apply to the self-evolution treatments"):
        load_config("search-r1", "cpu-smoke", control="full-data")
    with pytest.raises(CfbenchError, match=r"knob steps must be at most rounds x \(proposer_steps \+ solver_steps\) = 9"):
        load_config("dr-zero", "cpu-smoke", steps=10)
