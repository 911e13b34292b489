"""Evaluation suites: the bundled ones (hash-verified against tasks/manifest.json) and user files.

A suite file is JSON lines in FlashRAG form: `id`, `question`, `golden_answers` (list of strings),
optionally `benchmark` (default: the file's stem). Bundled rows also carry `source` and
`evidence_ids`; cfbench reads only the fields it needs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cfbench.harness import jsonl
from cfbench.harness.errors import CfbenchError
from cfbench.harness.paths import MANIFEST, TASKS_DIR


@dataclass(frozen=True)
class Question:
    id: str
    benchmark: str
    question: str
    golden_answers: tuple[str, ...]


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    sha256: str
    questions: tuple[Question, ...]


def bundled_suites() -> dict[str, dict]:
    return json.loads(MANIFEST.read_text())["suites"]


def load_suite(name_or_path: str) -> Suite:
    """A bundled suite by name, or a suite file by path."""
    bundled = bundled_suites()
    if name_or_path in bundled:
        entry = bundled[name_or_path]
        path = TASKS_DIR / entry["file"]
        data = jsonl.read_verified(path, entry["sha256"])
        return Suite(name_or_path, path, entry["sha256"], _parse(path, data, default_benchmark=name_or_path))
    path = Path(name_or_path)
    if not path.exists():
        raise CfbenchError(
            f"unknown suite {name_or_path!r}: not a bundled suite ({', '.join(bundled)}) and no such file"
        )
    data = jsonl.read_bytes(path)
    stem = path.name.split(".")[0]
    return Suite(stem, path, jsonl.sha256(data), _parse(path, data, default_benchmark=stem))


def _parse(path: Path, data: bytes, default_benchmark: str) -> tuple[Question, ...]:
    questions: list[Question] = []
    seen: dict[str, int] = {}
    for lineno, row in jsonl.iter_rows(path, data):
        where = f"{path}:{lineno}"
        qid, question, answers = row.get("id"), row.get("question"), row.get("golden_answers")
        if not isinstance(qid, str) or not qid:
            raise CfbenchError(f"{where}: field 'id' must be a non-empty string, got {qid!r}")
        if not isinstance(question, str) or not question.strip():
            raise CfbenchError(f"{where}: field 'question' must be a non-empty string, got {question!r}")
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
            raise CfbenchError(f"{where}: field 'golden_answers' must be a non-empty list of strings, got {answers!r}")
        if qid in seen:
            raise CfbenchError(f"{where}: duplicate id {qid!r} (first on line {seen[qid]})")
        seen[qid] = lineno
        benchmark = row.get("benchmark", default_benchmark)
        if not isinstance(benchmark, str) or not benchmark:
            raise CfbenchError(f"{where}: field 'benchmark' must be a non-empty string, got {benchmark!r}")
        questions.append(Question(qid, benchmark, question, tuple(answers)))
    if not questions:
        raise CfbenchError(f"{path}: the suite has no questions")
    return tuple(questions)
