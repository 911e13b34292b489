"""The `cfbench_fixed1325` lm-eval task group run by lm-eval itself: its hf model on the bundled SmolLM2, mini suite, 2 questions
per benchmark. Every per-question score lm-eval logs must be cfbench's metric of the answer it logged."""

from __future__ import annotations

from pathlib import Path

import pytest

from cfbench.harness.checkpoints import resolve
from cfbench.harness.metrics import BENCHMARKS, METRICS, score
from cfbench.harness.suite import load_suite

TASKS = Path(__file__).resolve().parents[1] / "cfbench" / "tasks" / "lm_eval"


@pytest.mark.slow
def test_lmeval_runs_the_group_with_cfbench_questions_and_metrics():
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager
    from lm_eval.utils import make_table

    # include_defaults=False: lm-eval's own thousands of task files are not indexed (the CLI's --include_path adds to them)
    manager = TaskManager(include_path=str(TASKS), include_defaults=False, metadata={"suite": "mini"})
    out = simple_evaluate(
        model="hf",
        model_args=f"pretrained={resolve('smollm2-135m').location},dtype=float32",
        tasks=["cfbench_fixed1325"],
        limit=2,
        task_manager=manager,
        device="cpu",
        batch_size=8,
        log_samples=True,
    )
    mini = load_suite("mini").questions
    tasks = {name: name.rpartition("cfbench_")[2] for name in out["results"] if name != "cfbench_fixed1325"}
    assert sorted(tasks.values()) == sorted(BENCHMARKS)
    for name, bench in tasks.items():
        first_two = [q for q in mini if q.benchmark == bench][:2]
        samples = out["samples"][name]
        assert [s["doc"]["id"] for s in samples] == [q.id for q in first_two]
        for sample in samples:
            expected = score(sample["filtered_resps"][0], sample["doc"]["golden_answers"])
            assert {m: sample[m] for m in METRICS} == expected
        assert out["results"][name]["cover_em,none"] == sum(s["cover_em"] for s in samples) / 2
    group = out["results"]["cfbench_fixed1325"]
    assert group["f1,none"] == pytest.approx(sum(out["results"][t]["f1,none"] for t in tasks) / 7)  # unweighted, like avg7
    shown = [line.split("|")[1].strip(" -") for line in make_table(out).splitlines()[2:]]
    assert sorted(x for x in shown if x) == sorted(["cfbench_fixed1325", *tasks])  # the group, then each benchmark once
