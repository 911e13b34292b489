"""lm-eval hooks for cfbench's closed-book tasks (cfbench_<benchmark>.yaml, groups cfbench_single_hop, cfbench_multi_hop,
cfbench_avg7): cfbench's questions and cfbench's metrics.

lm-eval imports this file by path (`!function hooks.NAME`), so a closed-book baseline of any lm-eval model is scored on
the same questions with the same normalisation and Cover-EM/EM/substring-EM/F1 as a cfbench run.
"""

from __future__ import annotations

from datasets import Dataset, DatasetDict

from cfbench.harness.metrics import score
from cfbench.harness.suite import load_suite


def load_benchmark(suite: str = "fixed1325", benchmark: str = "", **_metadata) -> DatasetDict:
    """One benchmark of a cfbench suite as lm-eval's test split; `suite` can be set with `lm_eval --metadata '{"suite": "mini"}'`."""
    rows = [
        {"id": q.id, "question": q.question, "golden_answers": list(q.golden_answers)}
        for q in load_suite(suite).questions
        if q.benchmark == benchmark
    ]
    if not rows:
        raise ValueError(f"cfbench suite {suite!r} has no questions of benchmark {benchmark!r}")
    return DatasetDict({"test": Dataset.from_list(rows)})


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """cfbench's four metrics of the generated answer (lm-eval averages them per task)."""
    return score(results[0], doc["golden_answers"])
