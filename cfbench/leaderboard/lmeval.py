"""A run in lm-evaluation-harness's results layout, so lm-eval tooling can read cfbench numbers.

Each benchmark becomes a task `cfbench_<benchmark>` and each average a group; metric keys are
lm-eval's `<metric>,<filter>` with the filter `none`, each with its standard error (sample standard
deviation over sqrt(n); for an average of k benchmarks, sqrt(sum of their squared errors) / k).
"""

from __future__ import annotations

import math

import numpy as np

from cfbench.leaderboard.stats import by_benchmark
from cfbench.leaderboard.store import Run
from cfbench.harness.metrics import GROUPS, METRICS

PREFIX = "cfbench_"


def lmeval_results(run: Run) -> dict:
    results = run.results
    knobs = results["protocol"]["knobs"]
    errors = {b: _stderr(part["scores"]) for b, part in by_benchmark(run.rows).items()}
    tasks = [b for b in results["scores"] if b not in GROUPS]
    groups = [g for g in results["scores"] if g in GROUPS]

    def entry(name: str, se) -> dict:
        scores = results["scores"][name]
        out = {"alias": name}
        for i, m in enumerate(METRICS):
            out[f"{m},none"] = scores[m]
            out[f"{m}_stderr,none"] = float(se[i])
        return out

    group_errors = {g: [math.sqrt(sum(errors[b][i] ** 2 for b in GROUPS[g])) / len(GROUPS[g]) for i in range(len(METRICS))]
                    for g in groups}
    metadata = {"suite": results["suite"], "protocol": results["protocol"], "metric_version": results["metric_version"],
                "retriever": results["retriever"]}
    return {
        "results": {PREFIX + b: entry(b, errors[b]) for b in tasks},
        "groups": {PREFIX + g: entry(g, group_errors[g]) for g in groups},
        "group_subtasks": {PREFIX + g: [PREFIX + b for b in GROUPS[g]] for g in groups},
        "configs": {PREFIX + b: {
            "task": PREFIX + b,
            "dataset_path": results["suite"]["path"],
            "dataset_name": b,
            "test_split": results["suite"]["name"],
            "output_type": "generate_until",
            "num_fewshot": 0,
            "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in METRICS],
            "generation_kwargs": {"until": ["</search>", "</answer>"], "do_sample": False, "max_gen_toks": knobs["max_new_tokens"]},
            "metadata": {"version": results["protocol"]["version"], **metadata},
        } for b in tasks},
        "versions": {PREFIX + b: results["protocol"]["version"] for b in tasks},
        "n-shot": {PREFIX + b: 0 for b in tasks},
        "higher_is_better": {PREFIX + name: dict.fromkeys(METRICS, True) for name in tasks + groups},
        "n-samples": {PREFIX + b: {"original": results["scores"][b]["n"], "effective": results["scores"][b]["n"]} for b in tasks},
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
        "model_name": results["model"].get("model"),
        "total_evaluation_time_seconds": str(results.get("wall_time_s")),
        "cfbench_run_id": run.id,
    }


def _stderr(scores: np.ndarray) -> np.ndarray:
    """Standard error of each metric's mean over the questions (0 for a single question)."""
    n = len(scores)
    return scores.std(axis=0, ddof=1) / math.sqrt(n) if n > 1 else np.zeros(len(METRICS))
