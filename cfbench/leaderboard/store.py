"""Runs as the leaderboard reads them: a `cfbench eval` run directory or a stored, content-addressed entry.

A stored entry is `leaderboards/<suite>/runs/<id>/` with the run's results.json, its per-question
scores (scores.jsonl: id, benchmark, scores), its trajectories (trajectories.jsonl.gz: every
question's turns, prediction and gold answers, exactly as `cfbench eval` wrote them) and entry.json
(the labels shown in the tables). The id hashes the results, the scores and the trajectories, so
storing the same run twice changes nothing, and an entry edited by hand no longer matches its name.

Scores are never taken on trust: every stored prediction is extracted again from the model's stored
generated text with the recorded protocol's extraction, every per-question score is recomputed from
that prediction and the gold answers with the recorded metric version, the gold answers are checked
against the suite file when it is at hand (the bundled suites always are), and any mismatch is
refused. `cfbench leaderboard verify` goes further where the checkpoint is at hand: it generates a
sample of the trajectories again (verify.py). An entry
stored before trajectories were kept (`trajectories` is None) can only be checked for consistency;
the tables mark it "scores only".
"""

from __future__ import annotations

import gzip
import json
import math
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from cfbench.harness.errors import CfbenchError
from cfbench.harness.jsonl import (
    atomic_dir,
    iter_rows,
    json_text,
    jsonl_text,
    read_bytes,
    refuse_constant,
    sha256,
    write_atomic,
    write_jsonl,
)
from cfbench.harness.metrics import METRIC_VERSION, METRICS, aggregate, score
from cfbench.harness.paths import from_portable
from cfbench.harness.protocol import PROTOCOL_VERSION, final_answer
from cfbench.harness.runrecord import RESULTS, TRAJECTORIES
from cfbench.harness.suite import load_suite

RUNS = "runs"
SCORES = "scores.jsonl"
STORED_TRAJECTORIES = "trajectories.jsonl.gz"
ENTRY = "entry.json"
LABELS = ("name", "treatment", "scale", "config")  # scale: the model size; config: the training configuration
_SUITE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_RESULT_KEYS = ("suite", "protocol", "metric_version", "model", "retriever", "scores")


@dataclass(frozen=True)
class Run:
    id: str
    results: dict
    rows: list[dict]  # one per question, in suite order: id, benchmark, scores
    labels: dict[str, str]
    path: Path
    trajectories: list[dict] | None  # the eval rows (question, gold, prediction, turns); None: a scores-only entry


def load_run(path: Path) -> Run:
    """A finished run directory or a stored entry, checked: scores recomputed from predictions, adding up to its results."""
    results_path = path / RESULTS
    if not results_path.is_file():
        raise CfbenchError(f"{path}: no {RESULTS}; name a finished run directory (cfbench eval --resume finishes one)")
    results = _read_json(results_path)
    missing = [k for k in _RESULT_KEYS if k not in results]
    if missing:
        raise CfbenchError(f"{results_path}: missing field {missing[0]!r}; it is not a cfbench results file")
    stored = (path / SCORES).is_file()
    trajectories_path = path / (STORED_TRAJECTORIES if stored else TRAJECTORIES)
    trajectories = None
    if trajectories_path.is_file() or not stored:
        trajectories = [row for _, row in iter_rows(trajectories_path, read_bytes(trajectories_path))]
        rows = rescored(trajectories_path, results, trajectories)
    if stored:
        score_rows = [_score_row(path / SCORES, lineno, row) for lineno, row in iter_rows(path / SCORES, read_bytes(path / SCORES))]
        if trajectories is not None and score_rows != rows:
            raise CfbenchError(f"{path / SCORES}: differs from the scores its stored predictions give; the entry was edited")
        rows = score_rows
    _check(path, results, rows)
    labels = _read_json(path / ENTRY) if stored else {}
    labels = {"name": results["model"].get("model") or "unnamed", "treatment": "", "scale": ""} | {
        k: str(labels[k]) for k in LABELS if k in labels
    }
    return Run(content_id(results, rows, trajectories), results, rows, labels, path, trajectories)


def content_id(results: dict, rows: list[dict], trajectories: list[dict] | None) -> str:
    """The entry's name: a hash of its results, scores and (when kept) trajectories."""
    text = jsonl_text([results, *rows]) + (jsonl_text(trajectories) if trajectories is not None else "")
    return sha256(text.encode())[:16]


def rescored(path: Path, results: dict, trajectories: list[dict]) -> list[dict]:
    """Every question's scores recomputed from its prediction and gold answers; a stored score that differs is refused.

    The prediction must be what the recorded protocol extracts from the model's own generated text (the
    last <answer> of its turns), so an edited prediction is refused even with its scores recomputed. The
    recorded metric and protocol versions must be the ones this cfbench implements (there is one of each so
    far), and the gold answers must be the suite's own when the suite file the results name is at hand with
    its hash.
    """
    version = results["metric_version"]
    if version != METRIC_VERSION:
        raise CfbenchError(
            f"{path}: scored with metric version {version!r}, but this cfbench recomputes scores with {METRIC_VERSION!r} only; "
            "use the cfbench release that made the run"
        )
    protocol = results["protocol"].get("version") if isinstance(results["protocol"], dict) else None
    if protocol != PROTOCOL_VERSION:
        raise CfbenchError(
            f"{path}: run under protocol {protocol!r}, but this cfbench extracts answers under {PROTOCOL_VERSION!r} only; "
            "use the cfbench release that made the run"
        )
    gold = _suite_gold(results)
    rows = []
    for lineno, row in enumerate(trajectories, start=1):
        where = f"{path}:{lineno}"
        qid, prediction, answers = row.get("id"), row.get("prediction"), row.get("golden_answers")
        if not isinstance(qid, str) or not isinstance(row.get("benchmark"), str):
            raise CfbenchError(f"{where}: a row needs a string id and benchmark; the record is damaged")
        if prediction is not None and not isinstance(prediction, str):
            raise CfbenchError(f"{where}: question {qid}: prediction must be a string or null, got {prediction!r}")
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
            raise CfbenchError(f"{where}: question {qid}: golden_answers must be a non-empty list of strings, got {answers!r}")
        if gold is not None and gold.get(qid) != answers:
            raise CfbenchError(
                f"{where}: question {qid}: gold answers {answers!r} are not suite {results['suite']['name']!r}'s "
                f"{gold.get(qid)!r}; the record was edited"
            )
        again = score(prediction or "", answers)
        stated = _score_row(path, lineno, row)["scores"]
        for metric in METRICS:
            if not math.isclose(again[metric], stated[metric], abs_tol=1e-12):
                raise CfbenchError(
                    f"{where}: question {qid}: stored {metric} {stated[metric]} but prediction {prediction!r} scores "
                    f"{again[metric]} against its gold answers under {version}; the record was edited"
                )
        extracted = final_answer(_generated(where, qid, row.get("turns")))
        if (prediction or "") != extracted:
            raise CfbenchError(
                f"{where}: question {qid}: stored prediction {prediction!r} but the model's generated text answers "
                f"{extracted!r} under protocol {protocol}; the record was edited"
            )
        rows.append({"benchmark": row["benchmark"], "id": qid, "scores": again})
    return rows


def _generated(where: str, qid: str, turns) -> list[str]:
    """The model's own text of each turn, the only place an answer may be taken from."""
    if not isinstance(turns, list) or not all(isinstance(t, dict) and isinstance(t.get("generated"), str) for t in turns):
        raise CfbenchError(f"{where}: question {qid}: turns must be a list of objects with the generated text; the record is damaged")
    return [t["generated"] for t in turns]


def _suite_gold(results: dict) -> dict[str, list[str]] | None:
    """The suite's gold answers by question id, when the file the results name exists with the recorded hash."""
    recorded = results["suite"]
    path = from_portable(str(recorded.get("path", "")))
    if not path.is_file() or sha256(read_bytes(path)) != recorded.get("sha256"):
        return None
    return {q.id: list(q.golden_answers) for q in load_suite(str(path)).questions}


def add(run: Run, root: Path, labels: dict[str, str | None]) -> tuple[Path, bool]:
    """Store the run under root/<suite>/runs/<id>/; returns (entry, whether it was new).

    A run stored before trajectories were kept is replaced by its full entry (same results and
    scores, same labels unless new ones are given).
    """
    suite = check_suite_name(run.results["suite"]["name"], str(run.path / RESULTS))
    check_whole_suite(run)
    if (root / suite).exists() and not (root / suite).is_dir():
        raise CfbenchError(
            f"{run.path / RESULTS}: suite {suite!r} names the file {root / suite}, not a leaderboard folder; "
            "rename the suite (suite.name) or choose another --root"
        )
    runs_dir = root / suite / RUNS
    dest = runs_dir / run.id
    given = {k: v for k, v in labels.items() if v is not None}
    if dest.is_dir():
        stored = load_run(dest).labels
        if any(given[k] != stored[k] for k in given):
            raise CfbenchError(f"{dest}: this run is already stored with labels {stored}; edit {dest / ENTRY} to relabel it")
        return dest, False
    scores_only = runs_dir / content_id(run.results, run.rows, None)
    previous = load_run(scores_only).labels if run.trajectories is not None and scores_only.is_dir() else {}
    with atomic_dir(dest) as tmp:
        write_atomic(tmp / RESULTS, json_text(run.results))
        write_jsonl(tmp / SCORES, run.rows)
        if run.trajectories is not None:
            (tmp / STORED_TRAJECTORIES).write_bytes(gzip.compress(jsonl_text(run.trajectories).encode(), mtime=0))
        write_atomic(tmp / ENTRY, json_text(run.labels | previous | given))
    if previous:
        shutil.rmtree(scores_only)
    return dest, True


def check_whole_suite(run: Run) -> None:
    """A leaderboard ranks whole suites: a run of the first N questions per benchmark (`eval --limit N`) is refused."""
    limit = run.results["suite"].get("limit")
    if limit is not None:
        raise CfbenchError(
            f"{run.path}: an `eval --limit {limit}` run (first {limit} questions per benchmark) cannot go on a leaderboard; "
            "evaluate the whole suite (no --limit) to publish"
        )


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
        check_whole_suite(run)
        if run.results["suite"]["name"] != suite_dir.name:
            raise CfbenchError(f"{run.path}: a run of suite {run.results['suite']['name']!r} stored under {suite_dir}; move it")
    return runs


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse_constant)
    except (OSError, ValueError) as err:
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
