"""Reading JSON-lines files (plain or gzip) with file:line errors, and content hashing."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

from cfbench.harness.errors import CfbenchError


def read_bytes(path: Path) -> bytes:
    """The file's content, decompressed when it ends in .gz."""
    if not path.is_file():
        raise CfbenchError(f"{path}: file not found")
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_verified(path: Path, expected: str) -> bytes:
    """A shipped file's content, refused unless it hashes to what tasks/manifest.json records."""
    data = read_bytes(path)
    digest = sha256(data)
    if digest != expected:
        raise CfbenchError(
            f"{path}: content hash {digest[:16]} does not match the manifest's {expected[:16]}; "
            "restore the file from git or rebuild it with `python -m cfbench.tasks.build_data`"
        )
    return data


def iter_rows(path: Path, data: bytes) -> Iterator[tuple[int, dict]]:
    """(line number, object) for every non-blank line; a bad line is a one-line error."""
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise CfbenchError(f"{path}:{lineno}: not UTF-8 text; re-encode the file as UTF-8") from None
        except json.JSONDecodeError as err:
            raise CfbenchError(f"{path}:{lineno}: not valid JSON ({err.msg}); fix or remove the line") from None
        if not isinstance(row, dict):
            raise CfbenchError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
        yield lineno, row
