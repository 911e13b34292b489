"""A run in lm-evaluation-harness's results structure, so lm-eval tooling (make_table, its results loaders) reads cfbench numbers.

The structure is what lm-eval 0.4's evaluator writes (evaluator_utils.EvalAcc, api.group.Group.aggregate), checked
against lm-eval itself in tests/test_lmeval_export.py:
- each benchmark is a task `cfbench_<benchmark>`, each average a group; `results` holds tasks and groups, `groups`
  the groups again, `group_subtasks` nests them (avg7 over multi_hop and single_hop, those over their benchmarks),
  so make_table prints each task once under its group;
- entries carry `name`, `alias`, `sample_len` (groups: summed over their leaves, plus `sample_count`) and metric
  keys `<metric>,none` with `<metric>_stderr,none`;
- tasks and groups both have `versions` and `n-shot` entries; `date` is when the run started (UNIX seconds).
A task's standard error is the sample standard deviation over sqrt(n). cfbench's averages are unweighted means of
benchmark means, which lm-eval writes as groups with `weight_by_size: false`; for those its Group.aggregate takes
the unweighted mean of the leaf tasks and `unweighted_mean_stderr`, sqrt(sum se^2) / k (its `pooled_sample_stderr`
is for size-weighted groups and would understate the error of an unweighted mean), so that is what is written.
"""

from __future__ import annotations

import math
from datetime import datetime

import numpy as np

from cfbench.harness import jsonl
from cfbench.harness.metrics import GROUPS, METRICS
from cfbench.harness.runrecord import SEGMENTS
from cfbench.harness.stats import by_benchmark
from cfbench.leaderboard.store import Run

PREFIX = "cfbench_"


def lmeval_results(run: Run) -> dict:
    results = run.results
    knobs, version = results["protocol"]["knobs"], results["protocol"]["version"]
    errors = {b: _stderr(part["scores"]) for b, part in by_benchmark(run.rows).items()}
    tasks = [b for b in results["scores"] if b not in GROUPS]
    groups = [g for g in results["scores"] if g in GROUPS]
    sizes = {b: results["scores"][b]["n"] for b in tasks}
    errors |= {g: np.sqrt(sum(errors[b] ** 2 for b in GROUPS[g])) / len(GROUPS[g]) for g in groups}

    def entry(name: str) -> dict:
        out = {"name": PREFIX + name, "alias": name, "sample_len": sum(sizes[b] for b in GROUPS.get(name, [name]))}
        for i, m in enumerate(METRICS):
            out[f"{m},none"] = results["scores"][name][m]
            out[f"{m}_stderr,none"] = float(errors[name][i])
        if name in GROUPS:
            out["sample_count"] = {f"{m},none": out["sample_len"] for m in METRICS}
        return out

    metadata = {
        "suite": results["suite"],
        "protocol": results["protocol"],
        "metric_version": results["metric_version"],
        "retriever": results["retriever"],
    }
    every = tasks + groups
    return {
        "results": {PREFIX + name: entry(name) for name in every},
        "groups": {PREFIX + g: entry(g) for g in groups},
        "group_subtasks": {PREFIX + g: [PREFIX + child for child in _children(g, groups)] for g in groups},
        "configs": {
            PREFIX + b: {
                "task": PREFIX + b,
                "dataset_path": results["suite"]["path"],
                "dataset_name": b,
                "test_split": results["suite"]["name"],
                "output_type": "generate_until",
                "num_fewshot": 0,
                "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in METRICS],
                "generation_kwargs": {"until": ["</search>", "</answer>"], "do_sample": False, "max_gen_toks": knobs["max_new_tokens"]},
                "metadata": {"version": version, **metadata},
            }
            for b in tasks
        },
        "versions": {PREFIX + name: version for name in every},
        "n-shot": {PREFIX + name: 0 for name in every},
        "higher_is_better": {PREFIX + name: dict.fromkeys(METRICS, True) for name in every},
        "n-samples": {PREFIX + b: {"original": sizes[b], "effective": sizes[b]} for b in tasks},
        "config": {
            "model": results["model"].get("engine"),
            "model_args": f"pretrained={results['model'].get('model')}",
            "model_sha": results["model"].get("weights_sha256"),
            "batch_size": results.get("batch_size"),
            "device": results["model"].get("device"),
            "limit": None,
            "bootstrap_iters": 0,
            "gen_kwargs": None,
            "random_seed": results.get("seed"),
            "numpy_seed": results.get("seed"),
            "torch_seed": results.get("seed"),
            "fewshot_seed": None,
        },
        "git_hash": results.get("git_commit"),
        "date": _started(run),
        "model_name": results["model"].get("model"),
        "total_evaluation_time_seconds": str(results.get("wall_time_s")),
        "cfbench_run_id": run.id,
    }


def _children(group: str, groups: list[str]) -> list[str]:
    """The smaller groups present that split `group` exactly (avg7: multi_hop, single_hop), else its benchmarks."""
    members = set(GROUPS[group])
    parts = [g for g in groups if g != group and set(GROUPS[g]) < members]
    if sorted(b for g in parts for b in GROUPS[g]) == sorted(members):
        return parts
    return list(GROUPS[group])


def _started(run: Run) -> float | None:
    """When the run's first session started, as lm-eval's `date` (UNIX seconds); None for a stored entry (no segments)."""
    path = run.path / SEGMENTS
    if not path.is_file():
        return None
    first = next(row for _, row in jsonl.iter_rows(path, jsonl.read_bytes(path)))
    return datetime.fromisoformat(first["started"]).timestamp()


def _stderr(scores: np.ndarray) -> np.ndarray:
    """Standard error of each metric's mean over the questions (0 for a single question)."""
    n = len(scores)
    return scores.std(axis=0, ddof=1) / math.sqrt(n) if n > 1 else np.zeros(len(METRICS))
