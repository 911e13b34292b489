"""A run in lm-evaluation-harness's results structure, so lm-eval tooling (make_table, its results loaders) reads cfbench numbers.

The structure is what lm-eval 0.4's evaluator writes (evaluator_utils.EvalAcc, api.group.Group.aggregate), checked
against lm-eval itself in tests/test_lmeval_export.py:
- each benchmark is a task `cfbench_<benchmark>`, each average a group; `results` holds tasks and groups, `groups`
  the groups again, `group_subtasks` nests them (avg7 over multi_hop and single_hop, those over their benchmarks),
  so make_table prints each task once under its group;
- entries carry `name`, `alias`, `sample_len` (groups: summed over their leaves, plus `sample_count`) and metric
  keys `<metric>,none` with `<metric>_stderr,none`;
- tasks and groups both have `versions` and `n-shot` entries (a task's version is the number its file's metadata
  holds, a group's its string, as lm-eval writes them); `date` is when the run started (UNIX seconds).
`cfbench leaderboard export` also writes each task's questions in the shape of lm-eval's `--log_samples`
(samples_<task>_<date id>.jsonl beside the results file, one row per question: doc_id, doc, target, arguments, resps,
filtered_resps, filter, metrics, the three hashes and the metric values), so tools that read lm-eval's samples read a
cfbench run's predictions too.

The task and group names and their version are one set, shared with lm-eval's task files in cfbench/tasks/lm_eval/
(written by `task_files` below; tests/test_lmeval_tasks.py checks the committed files are exactly that): there lm-eval
itself runs the same questions closed-book, as a baseline beside cfbench's search runs.

A task's standard error is the sample standard deviation over sqrt(n). cfbench's averages are unweighted means of
benchmark means, which lm-eval writes as groups with `weight_by_size: false`; for those its Group.aggregate takes
the unweighted mean of the leaf tasks and `unweighted_mean_stderr`, sqrt(sum se^2) / k (its `pooled_sample_stderr`
is for size-weighted groups and would understate the error of an unweighted mean), so that is what is written.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import datetime
from pathlib import Path

import numpy as np

from cfbench.harness import jsonl
from cfbench.harness.metrics import BENCHMARKS, GROUPS, METRICS
from cfbench.harness.protocol import PROTOCOL_VERSION, user_prompt
from cfbench.harness.runrecord import SEGMENTS
from cfbench.harness.stats import by_benchmark
from cfbench.leaderboard.store import Run

PREFIX = "cfbench_"
# lm-eval's version of every cfbench task and group: the protocol's (v1 -> 1), so a new protocol renames nothing and
# versions everything.
TASK_VERSION = int(PROTOCOL_VERSION.removeprefix("v"))
STOP = ["</search>", "</answer>"]


def lmeval_results(run: Run) -> dict:
    results = run.results
    knobs = results["protocol"]["knobs"]
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
                "generation_kwargs": _generation(knobs),
                "metadata": {"version": TASK_VERSION, **metadata},
            }
            for b in tasks
        },
        "versions": {PREFIX + name: str(TASK_VERSION) if name in GROUPS else TASK_VERSION for name in every},
        "n-shot": {PREFIX + name: 0 for name in every},
        "higher_is_better": {PREFIX + name: dict.fromkeys(METRICS, True) for name in every},
        "n-samples": {PREFIX + b: {"original": sizes[b], "effective": sizes[b]} for b in tasks},
        "config": {
            "model": results["model"].get("engine"),
            "model_args": f"pretrained={results['model'].get('model')}",
            "model_sha": results["model"].get("weights_sha256"),
            "batch_size": results.get("batch_size"),
            "device": results["model"].get("device"),
            "limit": results["suite"].get("limit"),  # eval --limit N: lm-eval's --limit N, the first N of each task
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


def _generation(knobs: dict) -> dict:
    return {"until": STOP, "do_sample": False, "max_gen_toks": knobs["max_new_tokens"]}


def samples(run: Run) -> dict[str, list[dict]]:
    """Each task's rows as lm-eval's --log_samples writes them (after its tracker's sanitising), in the run's order.

    The doc is what the task files' dataset holds (id, question, golden_answers); the argument is the protocol's
    first prompt and generation settings; resps and filtered_resps hold the final answer (the whole trajectory stays
    in the run's record). A stored scores-only entry has no predictions: {}.
    """
    if run.trajectories is None:
        return {}
    generation = _generation(run.results["protocol"]["knobs"])
    out: dict[str, list[dict]] = {}
    for row in run.trajectories:
        rows = out.setdefault(PREFIX + row["benchmark"], [])
        doc = {"id": row["id"], "question": row["question"], "golden_answers": row["golden_answers"]}
        prompt, prediction = user_prompt(row["question"]), row["prediction"] or ""
        target = row["golden_answers"][0]
        scores = row["scores"]
        rows.append(
            {
                "doc_id": len(rows),
                "doc": doc,
                "target": target,
                "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": str(generation)}},
                "resps": [[prediction]],
                "filtered_resps": [prediction],
                "filter": "none",
                "metrics": list(METRICS),
                "doc_hash": _hash(json.dumps(doc, indent=2, ensure_ascii=False)),
                "prompt_hash": _hash(prompt),
                "target_hash": _hash(str(target)),
                **{m: scores[m] for m in METRICS},
            }
        )
    return out


def sample_files(results_file: Path, run: Run) -> dict[Path, str]:
    """The samples_<task>_<date id>.jsonl files beside `results_file`, named as lm-eval's tracker names them: the date
    id is the one in results_<date id>.json, or the results file's stem."""
    match = re.fullmatch(r"results_(.+)\.json", results_file.name)
    date_id = match.group(1) if match else results_file.stem
    return {
        results_file.parent / f"samples_{task}_{date_id}.jsonl": "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        for task, rows in samples(run).items()
    }


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


TEMPLATE = "_closed_book_template_yaml"  # no .yaml ending: lm-eval indexes only task and group files
CLOSED_BOOK = """\
# lm-eval runs these cfbench tasks CLOSED-BOOK: the model answers from what it knows, with no retrieval and no search
# turns. cfbench's own runs (cfbench eval) search a BM25 index, so their scores are not comparable with these; the
# closed-book numbers are a baseline beside them. Same questions (a cfbench suite, hooks.load_benchmark) and the same
# normalisation and metrics (hooks.process_results). Generated by cfbench/leaderboard/lmeval.py (task_files); do not edit.
#   lm_eval --include_path cfbench/tasks/lm_eval --tasks cfbench_avg7 --model hf --model_args pretrained=MODEL
"""


def task_files() -> dict[str, str]:
    """lm-eval's task files for cfbench (file name -> text): one task per benchmark (cfbench_nq, ...), the groups
    cfbench_single_hop and cfbench_multi_hop over their benchmarks and cfbench_avg7 over those two (lm-eval's
    unweighted group mean over the leaf tasks is avg7's mean of benchmark means), all at TASK_VERSION.

        lm_eval --include_path cfbench/tasks/lm_eval --tasks cfbench_avg7 --model hf --model_args pretrained=MODEL
        lm_eval ... --tasks cfbench_nq,cfbench_multi_hop --metadata '{"suite": "mini"}'   # the 70-question mini suite
    """
    template = CLOSED_BOOK + "\n".join(
        [
            "custom_dataset: !function hooks.load_benchmark",
            "test_split: test",
            "output_type: generate_until",
            'doc_to_text: "Answer the question with a short answer (a few words).\\nQuestion: {{question}}\\nAnswer:"',
            'doc_to_target: "{{golden_answers[0]}}"',
            'generation_kwargs: {until: ["\\n", "Question:"], do_sample: false, max_gen_toks: 32}',
            "num_fewshot: 0",
            "process_results: !function hooks.process_results",
            "metric_list:",
            *(f"  - {{metric: {m}, aggregation: mean, higher_is_better: true}}" for m in METRICS),
            "",
        ]
    )
    files = {TEMPLATE: template}
    for b in BENCHMARKS:
        files[f"{PREFIX}{b}.yaml"] = CLOSED_BOOK + "\n".join(
            [
                f"task: {PREFIX}{b}",
                f"include: {TEMPLATE}",
                f"metadata: {{benchmark: {b}, suite: fixed1325, version: {TASK_VERSION}}}",
                "",
            ]
        )
    for group in GROUPS:
        files[f"{PREFIX}{group}.yaml"] = CLOSED_BOOK + "\n".join(
            [
                f"group: {PREFIX}{group}",
                "task:",
                *(f"  - {PREFIX}{child}" for child in _children(group, list(GROUPS))),
                "aggregate_metric_list:",
                *(f"  - {{metric: {m}, aggregation: mean, weight_by_size: false}}" for m in METRICS),
                f"metadata: {{version: {TASK_VERSION}}}",
                "",
            ]
        )
    return files


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
