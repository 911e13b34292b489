"""Where cfbench keeps shipped data and its cache."""

from __future__ import annotations

import os
from pathlib import Path

from cfbench import tasks

TASKS_DIR = Path(tasks.__file__).resolve().parent
BUNDLED_CORPUS = TASKS_DIR / "corpus" / "bundled.jsonl.gz"  # the evaluation corpus
TRAIN_SOURCES = TASKS_DIR / "corpus" / "train-sources.jsonl.gz"  # training splits only: self-evolution sources
MANIFEST = TASKS_DIR / "manifest.json"


def cache_dir(*parts: str) -> Path:
    """$CFBENCH_CACHE (default ~/.cache/cfbench), created on demand."""
    root = Path(os.environ.get("CFBENCH_CACHE") or Path.home() / ".cache" / "cfbench")
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_entry_lock(target: Path):
    """An inter-process lock for building one cache entry: the processes of a multi-process training run (or two
    evaluations started together) all find an index or model missing at once and would build it side by side,
    the later rename failing on the earlier's result. Held, the builder that comes second finds the entry made."""
    from filelock import FileLock

    return FileLock(target.parent / f".{target.name}.lock")


def portable(path: Path) -> str:
    """A path as records keep it: shipped data as `tasks/...` (valid wherever cfbench is installed)."""
    resolved = Path(path).resolve()
    if resolved.is_relative_to(TASKS_DIR):
        return "tasks/" + resolved.relative_to(TASKS_DIR).as_posix()
    return str(resolved)


def from_portable(recorded: str) -> Path:
    return TASKS_DIR / recorded.removeprefix("tasks/") if recorded.startswith("tasks/") else Path(recorded)


def shown(path: Path) -> str:
    """A path as messages and reports show it: relative to the working directory when under it (a repository's own
    runs, the same in any clone of it), else absolute."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(Path.cwd())) if resolved.is_relative_to(Path.cwd()) else str(resolved)
