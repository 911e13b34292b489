"""Evaluation suites: the bundled ones (hash-verified against tasks/manifest.json) and user files.

A suite file is JSON lines in FlashRAG form: `id`, `question`, `golden_answers` (list of strings),
optionally `benchmark` (default: the file's stem). Bundled rows also carry `source` and
`evidence_ids`; cfbench reads only the fields it needs. Training sets (cfbench.training.core.data)
are read with the same rules, `checked_questions`, so a row valid in one is valid in the other.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cfbench.harness import jsonl
from cfbench.harness.errors import CfbenchError
from cfbench.harness.paths import MANIFEST, TASKS_DIR


@dataclass(frozen=True, slots=True)  # slots: the full suite holds 28,133 of them
class Question:
    """One question: its id, the benchmark it belongs to (for a training question, its source), text and gold answers."""

    id: str
    benchmark: str
    question: str
    golden_answers: tuple[str, ...]


@dataclass(frozen=True)
class Suite:
    """A loaded suite: its name, file, the sha256 the questions were read with, and the questions in file order.

    `limit`: when set, only the first `limit` questions of each benchmark (in file order) are kept (`cfbench eval
    --limit N`); the file and its hash stay the suite's identity, and the limit is recorded beside them.
    """

    name: str
    path: Path
    sha256: str
    questions: tuple[Question, ...]
    limit: int | None = None


def bundled_suites() -> dict[str, dict]:
    return json.loads(MANIFEST.read_text())["suites"]


def load_suite(name_or_path: str) -> Suite:
    """A bundled suite by name, or a suite file by path."""
    bundled = bundled_suites()
    if name_or_path in bundled:
        entry = bundled[name_or_path]
        path = TASKS_DIR / entry["file"]
        data = jsonl.read_verified(path, entry["sha256"])
        return Suite(name_or_path, path, entry["sha256"], _parse(path, data, name_or_path))
    path = Path(name_or_path)
    if not path.exists():
        raise CfbenchError(f"unknown suite {name_or_path!r}: not a bundled suite ({', '.join(bundled)}) and no such file")
    data = jsonl.read_bytes(path)
    stem = path.name.split(".")[0]
    return Suite(stem, path, jsonl.sha256(data), _parse(path, data, stem))


def first_per_benchmark(suite: Suite, limit: int) -> Suite:
    """The suite cut to the first `limit` questions of each benchmark, in file order: the same subset every time."""
    if limit < 1:
        raise CfbenchError(f"--limit must be at least 1, got {limit}")
    seen: dict[str, int] = {}
    kept = []
    for q in suite.questions:
        seen[q.benchmark] = seen.get(q.benchmark, 0) + 1
        if seen[q.benchmark] <= limit:
            kept.append(q)
    return Suite(suite.name, suite.path, suite.sha256, tuple(kept), limit)


def _parse(path: Path, data: bytes, default_benchmark: str) -> tuple[Question, ...]:
    rows = checked_questions(file_rows(path, data), "benchmark", default_benchmark, f"{path}: the suite")
    return tuple(Question(*row) for row in rows)


def file_rows(path: Path, data: bytes) -> Iterator[tuple[str, dict]]:
    """(place, row) for checked_questions: place is `file:line`."""
    return ((f"{path}:{lineno}", row) for lineno, row in jsonl.iter_rows(path, data))


def checked_questions(
    rows: Iterable[tuple[str, dict]], group: str, default_group: str, what: str
) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(id, group, question, golden_answers) for each (place, row), in order; the one rule set for questions.

    `group` is the field that names where a question comes from (a suite's `benchmark`, a training set's
    `source`), defaulting to `default_group`. A blank answer is refused because it would match every
    prediction after normalisation; an id must be unique because trajectories and resumes are keyed by it.
    """
    out: list[tuple[str, str, str, tuple[str, ...]]] = []
    seen: dict[str, str] = {}
    for where, row in rows:
        qid, question, answers = row.get("id"), row.get("question"), row.get("golden_answers")
        source = row.get(group, default_group)
        for field, value in (("id", qid), ("question", question), (group, source)):
            if not isinstance(value, str) or not value.strip():
                raise CfbenchError(f"{where}: field {field!r} must be a non-blank string, got {value!r}; fix or remove the row")
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) and a.strip() for a in answers):
            raise CfbenchError(
                f"{where}: field 'golden_answers' must be a non-empty list of non-blank strings, got {answers!r}; fix or remove the row"
            )
        if qid in seen:
            raise CfbenchError(f"{where}: duplicate id {qid!r} (first at {seen[qid]}); give each question its own id")
        seen[qid] = where
        out.append((qid, source, question, tuple(answers)))
    if not out:
        raise CfbenchError(f"{what} has no questions")
    return out
