"""The project's file helpers: JSON-lines read (plain or gzip, file:line errors) and write, atomic files and
directories, content hashing.

One rule for every JSON cfbench writes: non-ASCII text stays UTF-8 (a question in any script reads as itself
in the file) and keys are sorted (the same object is always the same bytes, so files hash and diff stably).
Exception: tasks/build_data.py keeps each shipped row's field order, because the suites' bytes are pinned
by hash in tasks/manifest.json.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
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


def iter_rows(path: Path, data: bytes | Iterable[bytes]) -> Iterator[tuple[int, dict]]:
    """(line number, object) for every non-blank line of the file's content, or of its lines as they are read
    (a file object opened in binary mode: nothing but the current line is held); a bad line is a one-line error."""
    lines = data.split(b"\n") if isinstance(data, bytes) else data
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"), parse_constant=refuse_constant)
        except UnicodeDecodeError:
            raise CfbenchError(f"{path}:{lineno}: not UTF-8 text; re-encode the file as UTF-8") from None
        except json.JSONDecodeError as err:
            raise CfbenchError(f"{path}:{lineno}: not valid JSON ({err.msg}); fix or remove the line") from None
        except ValueError as err:
            raise CfbenchError(f"{path}:{lineno}: not valid JSON ({err}); fix or remove the line") from None
        if not isinstance(row, dict):
            raise CfbenchError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
        yield lineno, row


def refuse_constant(name: str):
    """Python's JSON reader takes NaN and Infinity, which JSON has not: a file holding one is refused, never copied on."""
    raise ValueError(f"{name} is not a JSON value")


def dumps(obj) -> str:
    """One JSON line."""
    return json.dumps(obj, ensure_ascii=False, sort_keys=True)


def json_text(obj) -> str:
    """A JSON document meant to be read by people too (results, entries): indented, newline-terminated."""
    return json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=True) + "\n"


def jsonl_text(rows: Iterable) -> str:
    return "".join(dumps(r) + "\n" for r in rows)


def write_atomic(path: Path, text: str) -> None:
    """Readers see the old file or the new one, never a torn one, even if the process dies mid-write."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def write_jsonl(path: Path, rows: Iterable) -> None:
    write_atomic(path, jsonl_text(rows))


def append_jsonl(path: Path, rows: Iterable) -> None:
    """All rows in one write, synced: a crash loses the whole batch or nothing, and resume redoes a batch whole."""
    with path.open("a", encoding="utf-8") as f:
        f.write(jsonl_text(rows))
        f.flush()
        os.fsync(f.fileno())


@contextmanager
def atomic_dir(target: Path, replace: bool = False) -> Iterator[Path]:
    """A fresh directory beside target (so the final move is one rename) that becomes target when the block
    succeeds: readers never see half of it, and a failed build leaves nothing behind. With replace, an existing
    target is removed first; without, target must be absent or an empty directory (which the rename replaces)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        yield tmp
        os.chmod(tmp, 0o755)  # mkdtemp makes it private
        if replace:
            shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
