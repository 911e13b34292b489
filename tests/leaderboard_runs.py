"""Run directories written directly, for tests of the leaderboard machinery (not of any model).

The predictions are synthetic: each benchmark gets a fixed share of covered answers ("x", or "x y"
which covers the gold "x" without matching it exactly), drawn with a seeded generator, each answered
in one turn; scores and results.json are computed from them exactly as `cfbench eval` does.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from cfbench.harness.metrics import BENCHMARKS, METRIC_VERSION, aggregate, score
from cfbench.harness.protocol import PROTOCOL_VERSION, Knobs
from cfbench.harness.runrecord import CONFIG, RESULTS, TRAJECTORIES, dumps

SUITE = {"name": "fixed1325", "path": "tasks/suites/fixed1325.jsonl", "sha256": "a" * 64}
RETRIEVER = {
    "kind": "bm25",
    "params": {"k1": 0.9, "b": 0.4},
    "corpus": "tasks/corpus/bundled.jsonl.gz",
    "corpus_sha256": "c" * 64,
    "index_sha256": "1" * 64,
}


def question_ids(per_benchmark: int) -> list[tuple[str, str]]:
    return [(bench, f"{bench}-{i}") for bench in BENCHMARKS for i in range(per_benchmark)]


def answer_turn(prediction: str) -> dict:
    """The one turn that answers `prediction`, as the agent loop records it (the prediction is extracted from it)."""
    return {"action": "answer", "doc_ids": [], "doc_scores": [], "generated": f"<answer> {prediction} </answer>", "query": None}


def write_run(
    path: Path,
    accuracy: dict[str, float] | float,
    *,
    seed: int = 0,
    per_benchmark: int = 40,
    model: str = "m",
    knobs: dict | None = None,
    retriever: dict | None = None,
    suite: dict | None = None,
    engine: str = "hf",
    threads: int = 2,
    batch_size: int = 16,
    ids: list[tuple[str, str]] | None = None,
) -> Path:
    """A finished run whose benchmark b answers a share accuracy[b] of its questions correctly."""
    rng = np.random.default_rng(seed)
    rows = []
    for bench, qid in ids or question_ids(per_benchmark):
        share = accuracy if isinstance(accuracy, float) else accuracy[bench]
        prediction = ("x" if rng.random() < 0.7 else "x y") if rng.random() < share else "y"
        rows.append(
            {
                "id": qid,
                "benchmark": bench,
                "question": f"q {qid}?",
                "golden_answers": ["x"],
                "turns": [answer_turn(prediction)],
                "prediction": prediction,
                "scores": score(prediction, ["x"]),
            }
        )
    config = {
        "record_version": 1,
        "suite": {**(suite or SUITE), "n": len(rows)},
        "protocol": {"version": PROTOCOL_VERSION, "knobs": knobs or Knobs().as_dict()},
        "metric_version": METRIC_VERSION,
        "model": {"engine": engine, "model": model, "weights_sha256": "f" * 64, "threads": threads, "device": "cpu"},
        "retriever": retriever or RETRIEVER,
        "batch_size": batch_size,
        "seed": 0,
    }
    path.mkdir(parents=True)
    (path / CONFIG).write_text(dumps(config) + "\n")
    (path / TRAJECTORIES).write_text("".join(dumps(r) + "\n" for r in rows))
    results = {
        **config,
        "scores": aggregate(rows),
        "stats": {},
        "packages": {},
        "python": "3.11",
        "git_commit": None,
        "wall_time_s": 1.0,
        "segments": 1,
    }
    (path / RESULTS).write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return path
