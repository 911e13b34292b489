"""cfbench's lm-eval task files: generated from the names and version the export writes, each benchmark a task of its
own, grouped single-hop, multi-hop and avg7, and run closed-book by lm-eval itself: its hf model on the bundled SmolLM2,
mini suite, 2 questions per benchmark. Every per-question score lm-eval logs must be cfbench's metric of the answer it
logged, and its logged samples have the fields of the export's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cfbench.harness.checkpoints import resolve
from cfbench.harness.metrics import BENCHMARKS, GROUPS, METRICS, MULTI_HOP, SINGLE_HOP, score
from cfbench.harness.suite import load_suite
from cfbench.leaderboard.lmeval import PREFIX, TASK_VERSION, lmeval_results, task_files
from cfbench.leaderboard.lmeval import samples as exported_samples
from cfbench.leaderboard.store import load_run
from leaderboard_runs import write_run

TASKS = Path(__file__).resolve().parents[1] / "cfbench" / "tasks" / "lm_eval"


def _manager(**metadata):
    from lm_eval.tasks import TaskManager

    # include_defaults=False: lm-eval's own thousands of task files are not indexed (the CLI's --include_path adds to them)
    return TaskManager(include_path=str(TASKS), include_defaults=False, metadata=metadata)


def test_the_task_files_are_the_generated_ones():
    """The names and version in the files are the export's: the files are task_files() exactly, none left over."""
    committed = {p.name: p.read_text() for p in TASKS.iterdir() if p.is_file() and p.name != "hooks.py"}
    assert committed == task_files()
    for name, text in committed.items():
        assert "CLOSED-BOOK" in text and "no retrieval" in text, name


def test_each_benchmark_is_a_task_lmeval_selects_alone():
    from lm_eval.tasks import get_task_dict

    manager = _manager(suite="mini")
    assert set(manager.all_tasks) >= {PREFIX + b for b in BENCHMARKS} | {PREFIX + g for g in GROUPS}
    [(name, task)] = get_task_dict(["cfbench_nq"], manager).items()
    assert name == "cfbench_nq" and task.VERSION == TASK_VERSION
    assert [d["id"] for d in task.test_docs()] == [q.id for q in load_suite("mini").questions if q.benchmark == "nq"]


def test_the_groups_hold_single_hop_multi_hop_and_avg7_over_both():
    from lm_eval.tasks import get_task_dict

    manager = _manager(suite="mini")

    def tree(spec):
        return {
            (key.group_name if hasattr(key, "group_name") else key): tree(value) if isinstance(value, dict) else None
            for key, value in spec.items()
        }

    assert tree(get_task_dict(["cfbench_single_hop"], manager)) == {"cfbench_single_hop": {PREFIX + b: None for b in SINGLE_HOP}}
    assert tree(get_task_dict(["cfbench_avg7"], manager)) == {
        "cfbench_avg7": {
            "cfbench_multi_hop": {PREFIX + b: None for b in MULTI_HOP},
            "cfbench_single_hop": {PREFIX + b: None for b in SINGLE_HOP},
        }
    }


@pytest.mark.slow
def test_lmeval_runs_the_groups_with_cfbench_questions_and_metrics(tmp_path):
    from lm_eval import simple_evaluate
    from lm_eval.utils import make_table

    manager = _manager(suite="mini")
    out = simple_evaluate(
        model="hf",
        model_args=f"pretrained={resolve('smollm2-135m').location},dtype=float32",
        tasks=["cfbench_avg7"],
        limit=2,
        task_manager=manager,
        device="cpu",
        batch_size=8,
        log_samples=True,
    )
    mini = load_suite("mini").questions
    tasks = {name: name.removeprefix(PREFIX) for name in out["results"] if name.removeprefix(PREFIX) in BENCHMARKS}
    assert sorted(tasks.values()) == sorted(BENCHMARKS)
    for name, bench in tasks.items():
        first_two = [q for q in mini if q.benchmark == bench][:2]
        samples = out["samples"][name]
        assert [s["doc"]["id"] for s in samples] == [q.id for q in first_two]
        for sample in samples:
            expected = score(sample["filtered_resps"][0], sample["doc"]["golden_answers"])
            assert {m: sample[m] for m in METRICS} == expected
        assert out["results"][name]["cover_em,none"] == sum(s["cover_em"] for s in samples) / 2
    group = out["results"]["cfbench_avg7"]
    assert group["f1,none"] == pytest.approx(sum(out["results"][t]["f1,none"] for t in tasks) / 7)  # unweighted, like avg7
    for g in ("multi_hop", "single_hop"):
        members = [PREFIX + b for b in GROUPS[g]]
        assert out["results"][PREFIX + g]["f1,none"] == pytest.approx(sum(out["results"][t]["f1,none"] for t in members) / len(members))
    shown = [line.split("|")[1].strip(" -") for line in make_table(out).splitlines()[2:]]
    assert sorted(x for x in shown if x) == sorted([PREFIX + g for g in GROUPS] + list(tasks))  # each group and benchmark once

    # lm-eval's tracker writes the samples the way the export does: the same fields
    from lm_eval.loggers import EvaluationTracker

    logged = out.pop("samples")  # as lm-eval's CLI saves them: the results, then each task's samples
    tracker = EvaluationTracker(output_path=str(tmp_path / "lmeval" / "results.json"))
    tracker.save_results_aggregated(results=out, samples=logged)
    tracker.save_results_samples("cfbench_nq", logged["cfbench_nq"])
    [written] = (tmp_path / "lmeval").glob("samples_cfbench_nq_*.jsonl")
    theirs = json.loads(written.read_text().splitlines()[0])
    run = write_run(tmp_path / "run", 0.5, ids=[(b, f"{b}-{i}") for b in BENCHMARKS for i in range(2)])
    exported = lmeval_results(load_run(run))
    assert exported["versions"] == out["versions"]  # one set of names and versions, typed as lm-eval types them
    # lm-eval fills a group's n-shot in one pass over the groups, so the outer group can miss its children's: every
    # value it wrote is the export's
    assert {name: exported["n-shot"][name] for name in out["n-shot"]} == out["n-shot"] and set(out["n-shot"]) <= set(exported["n-shot"])
    assert {g: sorted(out["group_subtasks"][g]) for g in exported["group_subtasks"]} == {
        g: sorted(children) for g, children in exported["group_subtasks"].items()
    }  # the same nesting: avg7 over multi_hop and single_hop, those over their benchmarks
    ours = exported_samples(load_run(run))["cfbench_nq"][0]
    assert set(ours) == set(theirs) and set(ours["arguments"]["gen_args_0"]) == set(theirs["arguments"]["gen_args_0"])
    assert set(ours["doc"]) == set(theirs["doc"]) and ours["metrics"] == theirs["metrics"]
