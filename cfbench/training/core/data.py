"""Training questions: the bundled Search-R1 mix, a user's JSON-lines file, or a hub dataset on request.

`search-r1` is tasks/train/search-r1.jsonl.gz (NQ-open train + HotpotQA train, every question an eval
suite asks removed; see tasks/README.md), hash-checked against tasks/manifest.json on every load like
the bundled suites. A user file has the same fields: `id`, `question`, `golden_answers` (list of
strings) and optionally `source` (default: the file's stem). A training question is a suite's `Question`
whose benchmark is its source. `hub:REPO_ID` (a hub dataset) or a
directory (a local copy of one) is a dataset in Search-R1's form, read with `datasets.load_dataset`
(parquet, JSON lines...): its train split's files, Search-R1's columns mapped to those fields. Only a
`hub:` spec ever touches the network.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from cfbench.harness import jsonl
from cfbench.harness.errors import CfbenchError
from cfbench.harness.paths import MANIFEST, TASKS_DIR
from cfbench.harness.suite import Question, checked_questions, file_rows

HUB = "hub:"


def bundled_train_sets() -> dict[str, dict]:
    return json.loads(MANIFEST.read_text()).get("train", {})


def load_train_set(spec: str, sources: Sequence[str] | None = None) -> list[Question]:
    """The questions of a bundled set, a file, a dataset directory or `hub:REPO_ID`, only those of `sources` when given."""
    bundled = bundled_train_sets()
    if spec.startswith(HUB):
        questions = _checked(_dataset_rows(spec.removeprefix(HUB), spec), default_source="hub", name=spec)
    elif spec in bundled:
        path = TASKS_DIR / bundled[spec]["file"]
        questions = _from_file(path, jsonl.read_verified(path, bundled[spec]["sha256"]))
    elif Path(spec).is_file():
        questions = _from_file(Path(spec), jsonl.read_bytes(Path(spec)))
    elif Path(spec).is_dir():
        questions = _checked(_dataset_rows(spec, spec), default_source="hub", name=spec)
    else:
        raise CfbenchError(
            f"unknown training set {spec!r}: not a bundled set ({', '.join(bundled)}), "
            f"no such file or dataset directory, and not {HUB}REPO_ID"
        )
    return _select(questions, sources, spec)


def _from_file(path: Path, data: bytes) -> list[Question]:
    return _checked(file_rows(path, data), path.name.split(".")[0], str(path))


def _checked(rows: Iterable[tuple[str, dict]], default_source: str, name: str) -> list[Question]:
    return [Question(*row) for row in checked_questions(rows, "source", default_source, f"{name}: the training set")]


def _select(questions: list[Question], sources: Sequence[str] | None, spec: str) -> list[Question]:
    if sources is None:
        return questions
    known = list(dict.fromkeys(q.benchmark for q in questions))
    missing = [s for s in sources if s not in known]
    if missing:
        raise CfbenchError(f"{spec}: no questions from source(s) {', '.join(missing)}; its sources are {', '.join(known)}")
    return [q for q in questions if q.benchmark in sources]


# ---------------------------------------------------------------- hub:REPO_ID and dataset directories


def _dataset_rows(source: str, name: str) -> Iterator[tuple[str, dict]]:
    """(where, row) for each row of the train split of a dataset (hub id or directory), mapped from Search-R1's columns.

    The split's files come from datasets' own layout rules (train.parquet, data/train-*.parquet...) and are read
    one by one, so a row is named by its file; the other splits (Search-R1's test.parquet) are never read.
    """
    import datasets

    fix = "check the dataset id and network access" if name.startswith(HUB) else "check the dataset directory"
    try:
        splits = datasets.load_dataset_builder(source).config.data_files or {}
    except Exception as err:  # the hub client and datasets raise many types; all mean "could not open it"
        raise CfbenchError(f"{name}: cannot open the dataset ({_one_line(err)}); {fix}") from None
    if not splits.get("train"):
        raise CfbenchError(
            f"{name}: the dataset has no train split (its splits: {', '.join(map(str, splits)) or 'none'}); "
            "name its training file train.parquet (or train.jsonl), as Search-R1's layout does"
        )
    for file in splits["train"]:
        inside = _inside(file, source)
        place = f"{name}/{inside}"
        try:
            rows = datasets.load_dataset(source, data_files={"train": [inside]}, split="train")
        except Exception as err:
            raise CfbenchError(f"{place}: cannot read it ({_one_line(err)}); {fix}") from None
        if "question" not in rows.column_names or not {"golden_answers", "reward_model"} & set(rows.column_names):
            raise CfbenchError(
                f"{place}: columns {rows.column_names} lack Search-R1's 'question' and 'golden_answers' "
                "(or 'reward_model.ground_truth.target'); convert it to a JSON-lines file (id, question, golden_answers, source)"
            )
        for i, rec in enumerate(rows):
            yield f"{place} row {i}", _search_r1_row(rec, i)


def _inside(file: str, source: str) -> str:
    """A resolved data file's path inside its dataset: hf://datasets/OWNER/NAME@REVISION/PATH or a local path."""
    if file.startswith("hf://"):
        return re.sub(r"^hf://datasets/[^@]+@[^/]+/", "", file)
    return Path(os.path.relpath(file, os.path.abspath(source))).as_posix()


def _one_line(err: BaseException) -> str:
    """The error (or the one it wraps: datasets' DatasetGenerationError hides the reader's) as one line."""
    cause = err.__cause__ or err
    return " ".join(f"{type(cause).__name__}: {cause}".split())


def _search_r1_row(rec: dict, index: int) -> dict:
    """A Search-R1 record as a training row; FlashRAG ids (train_N) repeat across sources, so ids get the source."""
    answers = rec.get("golden_answers")
    if answers is None:
        reward = rec.get("reward_model")
        reward = json.loads(reward) if isinstance(reward, str) else reward or {}
        truth = reward.get("ground_truth")
        answers = truth.get("target") if isinstance(truth, dict) else truth
    source = rec.get("data_source") if _given(rec.get("data_source")) else "hub"
    local = rec.get("id") if _given(rec.get("id")) else f"row-{index}"
    return {"id": f"{source}/{local}", "source": source, "question": rec.get("question"), "golden_answers": _as_list(answers)}


def _given(cell: object) -> bool:
    """False for a missing scalar cell: None, "", or NaN (a float column's missing value)."""
    return cell is not None and cell == cell and cell != ""


def _as_list(value: object) -> object:
    """A single answer may be a bare string; anything else not a list is left to fail validation."""
    return [value] if isinstance(value, str) else value
