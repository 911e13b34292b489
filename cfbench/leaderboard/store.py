"""Runs as the leaderboard reads them: a `cfbench eval` run directory or a stored, content-addressed entry.

A stored entry is `leaderboards/<suite>/runs/<id>/` with the run's results.json, its per-question
scores (scores.jsonl: id, benchmark, scores) and entry.json (the labels shown in the tables). The id
is a hash of the results and the scores, so storing the same run twice changes nothing, and an
entry edited by hand no longer matches its name.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from cfbench.harness.errors import CfbenchError
from cfbench.harness.jsonl import atomic_dir, iter_rows, json_text, jsonl_text, read_bytes, sha256, write_atomic, write_jsonl
from cfbench.harness.metrics import METRICS, aggregate
from cfbench.harness.runrecord import RESULTS, TRAJECTORIES

RUNS = "runs"
SCORES = "scores.jsonl"
ENTRY = "entry.json"
LABELS = ("name", "treatment", "scale")
_SUITE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_RESULT_KEYS = ("suite", "protocol", "metric_version", "model", "retriever", "scores")


@dataclass(frozen=True)
class Run:
    id: str
    results: dict
    rows: list[dict]  # one per question, in suite order: id, benchmark, scores
    labels: dict[str, str]
    path: Path


def load_run(path: Path) -> Run:
    """A finished run directory or a stored entry, checked: its per-question scores must add up to its results."""
    results_path = path / RESULTS
    if not results_path.is_file():
        raise CfbenchError(f"{path}: no {RESULTS}; name a finished run directory (cfbench eval --resume finishes one)")
    results = _read_json(results_path)
    missing = [k for k in _RESULT_KEYS if k not in results]
    if missing:
        raise CfbenchError(f"{results_path}: missing field {missing[0]!r}; it is not a cfbench results file")
    if (path / SCORES).is_file():
        rows_path, labels = path / SCORES, _read_json(path / ENTRY)
    else:
        rows_path, labels = path / TRAJECTORIES, {}
    rows = [_score_row(rows_path, lineno, row) for lineno, row in iter_rows(rows_path, read_bytes(rows_path))]
    _check(path, results, rows)
    labels = {"name": results["model"].get("model") or "unnamed", "treatment": "", "scale": ""} | {
        k: str(labels[k]) for k in LABELS if k in labels
    }
    return Run(content_id(results, rows), results, rows, labels, path)


def content_id(results: dict, rows: list[dict]) -> str:
    return sha256(jsonl_text([results, *rows]).encode())[:16]


def add(run: Run, root: Path, labels: dict[str, str | None]) -> tuple[Path, bool]:
    """Store the run under root/<suite>/runs/<id>/; returns (entry, whether it was new)."""
    suite = check_suite_name(run.results["suite"]["name"], str(run.path / RESULTS))
    wanted = run.labels | {k: v for k, v in labels.items() if v is not None}
    if (root / suite).exists() and not (root / suite).is_dir():
        raise CfbenchError(
            f"{run.path / RESULTS}: suite {suite!r} names the file {root / suite}, not a leaderboard folder; "
            "rename the suite (suite.name) or choose another --root"
        )
    runs_dir = root / suite / RUNS
    dest = runs_dir / run.id
    if dest.is_dir():
        stored = load_run(dest).labels
        if any(labels.get(k) is not None and labels[k] != stored[k] for k in LABELS):
            raise CfbenchError(f"{dest}: this run is already stored with labels {stored}; edit {dest / ENTRY} to relabel it")
        return dest, False
    with atomic_dir(dest) as tmp:
        write_atomic(tmp / RESULTS, json_text(run.results))
        write_jsonl(tmp / SCORES, run.rows)
        write_atomic(tmp / ENTRY, json_text(wanted))
    return dest, True


def check_suite_name(name: str, where: str) -> str:
    """A suite name names a leaderboard folder, so it must be a plain folder name."""
    if not _SUITE_NAME.fullmatch(name):
        raise CfbenchError(f"{where}: suite name {name!r} cannot name a leaderboard folder; use letters, digits, '.', '_', '-'")
    return name


def stored_runs(suite_dir: Path) -> list[Run]:
    """Every entry of one suite's leaderboard, in id order; an entry whose content changed is an error."""
    runs_dir = suite_dir / RUNS
    entries = sorted(p for p in runs_dir.iterdir() if p.is_dir() and not p.name.startswith(".")) if runs_dir.is_dir() else []
    runs = [load_run(p) for p in entries]
    for run in runs:
        if run.id != run.path.name:
            raise CfbenchError(f"{run.path}: its content hashes to {run.id}, not its folder name; restore it or add the run again")
        if run.results["suite"]["name"] != suite_dir.name:
            raise CfbenchError(f"{run.path}: a run of suite {run.results['suite']['name']!r} stored under {suite_dir}; move it")
    return runs


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise CfbenchError(f"{path}: cannot read it as JSON ({err}); restore the file") from None
    if not isinstance(data, dict):
        raise CfbenchError(f"{path}: expected a JSON object")
    return data


def _score_row(path: Path, lineno: int, row: dict) -> dict:
    scores = row.get("scores")
    if (
        not isinstance(row.get("id"), str)
        or not isinstance(row.get("benchmark"), str)
        or not isinstance(scores, dict)
        or any(not isinstance(scores.get(m), (int, float)) for m in METRICS)
    ):
        raise CfbenchError(f"{path}:{lineno}: a row needs a string id and benchmark and scores with {', '.join(METRICS)}")
    return {"benchmark": row["benchmark"], "id": row["id"], "scores": {m: scores[m] for m in METRICS}}


def _check(path: Path, results: dict, rows: list[dict]) -> None:
    ids = [r["id"] for r in rows]
    if len(set(ids)) != len(ids):
        raise CfbenchError(f"{path}: question ids repeat in the per-question scores; the record is damaged")
    n = results["suite"].get("n")
    if len(rows) != n:
        raise CfbenchError(f"{path}: {len(rows)} scored questions but suite {results['suite'].get('name')!r} has {n}; finish the run first")
    recomputed = aggregate(rows)
    if set(recomputed) != set(results["scores"]):
        raise CfbenchError(
            f"{path}: {RESULTS} scores {sorted(results['scores'])} but the per-question scores give "
            f"{sorted(recomputed)}; the record was edited or is incomplete"
        )
    for bench, stated in results["scores"].items():
        for metric in METRICS:
            again = recomputed[bench][metric]
            if not math.isclose(again, stated.get(metric, math.nan), abs_tol=1e-12):
                raise CfbenchError(
                    f"{path}: {RESULTS} says {bench} {metric} = {stated.get(metric)} but the per-question scores "
                    f"give {again}; the record was edited or is incomplete"
                )
