"""Training questions: the bundled Search-R1 mix, a user's JSON-lines file, or a hub dataset on request.

`search-r1` is tasks/train/search-r1.jsonl.gz (NQ-open train + HotpotQA train, every question an eval
suite asks removed; see tasks/README.md), hash-checked against tasks/manifest.json on every load like
the bundled suites. A user file has the same fields: `id`, `question`, `golden_answers` (list of
strings) and optionally `source` (default: the file's stem). `hub:REPO_ID` downloads the parquet
train split of a dataset repo in Search-R1's form; only that spec ever touches the network.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cfbench.harness import jsonl
from cfbench.harness.errors import CfbenchError
from cfbench.harness.paths import MANIFEST, TASKS_DIR
from cfbench.harness.suite import checked_questions, file_rows

HUB = "hub:"


@dataclass(frozen=True)
class TrainQuestion:
    id: str
    source: str
    question: str
    golden_answers: tuple[str, ...]


def bundled_train_sets() -> dict[str, dict]:
    return json.loads(MANIFEST.read_text()).get("train", {})


def load_train_set(spec: str, sources: Sequence[str] | None = None) -> list[TrainQuestion]:
    """The questions of a bundled set, a file or `hub:REPO_ID`, only those of `sources` when given."""
    bundled = bundled_train_sets()
    if spec.startswith(HUB):
        questions = _checked(_hub_rows(spec.removeprefix(HUB)), default_source="hub", name=spec)
    elif spec in bundled:
        path = TASKS_DIR / bundled[spec]["file"]
        questions = _from_file(path, jsonl.read_verified(path, bundled[spec]["sha256"]))
    elif Path(spec).is_file():
        questions = _from_file(Path(spec), jsonl.read_bytes(Path(spec)))
    else:
        raise CfbenchError(f"unknown training set {spec!r}: not a bundled set ({', '.join(bundled)}), no such file, and not {HUB}REPO_ID")
    return _select(questions, sources, spec)


def _from_file(path: Path, data: bytes) -> list[TrainQuestion]:
    return _checked(file_rows(path, data), path.name.split(".")[0], str(path))


def _checked(rows: Iterable[tuple[str, dict]], default_source: str, name: str) -> list[TrainQuestion]:
    return [TrainQuestion(*row) for row in checked_questions(rows, "source", default_source, f"{name}: the training set")]


def _select(questions: list[TrainQuestion], sources: Sequence[str] | None, spec: str) -> list[TrainQuestion]:
    if sources is None:
        return questions
    known = list(dict.fromkeys(q.source for q in questions))
    missing = [s for s in sources if s not in known]
    if missing:
        raise CfbenchError(f"{spec}: no questions from source(s) {', '.join(missing)}; its sources are {', '.join(known)}")
    return [q for q in questions if q.source in sources]


# ---------------------------------------------------------------- hub:REPO_ID


def _hub_rows(repo_id: str) -> Iterator[tuple[str, dict]]:
    """(where, row) for each row of the repo's train parquet files, mapped from Search-R1's columns."""
    try:
        import pandas as pd
        from huggingface_hub import snapshot_download
    except ImportError as err:
        raise CfbenchError(f"{HUB}{repo_id} needs {err.name}: pip install huggingface_hub pandas pyarrow") from None
    try:
        root = Path(snapshot_download(repo_id, repo_type="dataset", allow_patterns=["*train*.parquet"]))
    except Exception as err:  # the hub client raises many types; all mean "could not get it"
        raise CfbenchError(
            f"{HUB}{repo_id}: download failed ({type(err).__name__}: {err}); check the dataset id and network access"
        ) from None
    files = sorted(p for p in root.rglob("*.parquet") if "train" in p.relative_to(root).as_posix())
    if not files:
        raise CfbenchError(f"{HUB}{repo_id}: the dataset has no parquet file with 'train' in its path")
    for file in files:
        frame = pd.read_parquet(file)
        place = f"{HUB}{repo_id}/{file.relative_to(root).as_posix()}"
        if "question" not in frame.columns or not {"golden_answers", "reward_model"} & set(frame.columns):
            raise CfbenchError(
                f"{place}: columns {list(frame.columns)} lack Search-R1's 'question' and 'golden_answers' "
                "(or 'reward_model.ground_truth.target'); convert it to a JSON-lines file (id, question, golden_answers, source)"
            )
        for i, rec in enumerate(frame.to_dict("records")):
            yield f"{place} row {i}", _search_r1_row(rec, i)


def _search_r1_row(rec: dict, index: int) -> dict:
    """A Search-R1 parquet record as a training row; FlashRAG ids (train_N) repeat across sources, so ids get the source."""
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
    """False for a missing scalar parquet cell: None, "", or the NaN pandas puts in a numeric column."""
    return cell is not None and cell == cell and cell != ""


def _as_list(value: object) -> object:
    """Parquet lists arrive as numpy arrays and single answers as strings; anything else is left to fail validation."""
    if isinstance(value, str):
        return [value]
    if hasattr(value, "tolist"):
        return value.tolist()
    return list(value) if isinstance(value, tuple) else value
