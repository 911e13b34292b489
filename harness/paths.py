"""Where cfbench keeps shipped data and its cache."""

from __future__ import annotations

import os
from pathlib import Path

import tasks

TASKS_DIR = Path(tasks.__file__).resolve().parent
BUNDLED_CORPUS = TASKS_DIR / "corpus" / "bundled.jsonl.gz"
MANIFEST = TASKS_DIR / "manifest.json"


def cache_dir(*parts: str) -> Path:
    """$CFBENCH_CACHE (default ~/.cache/cfbench), created on demand."""
    root = Path(os.environ.get("CFBENCH_CACHE") or Path.home() / ".cache" / "cfbench")
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
