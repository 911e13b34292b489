"""The run directory: run.json (what decides the outputs), trajectories.jsonl, segments.jsonl, results.json.

Trajectories are appended one finished batch at a time in a single write, so an interrupted run
loses at most the batch in flight. Batches are fixed slices of the suite order; on resume a batch
is either complete (kept) or redone whole, so a resumed run computes exactly what an uninterrupted
one would. A file that does not end in a whole line (a killed write, or a last line that lost only
its newline) is repaired before anything is appended to it, so a row is never glued onto another.

One process writes a run directory at a time: `open` takes an advisory lock on its `.lock` file (holding the
writer's PID), released by `close` or by the process's end, however it ends; a second writer is refused naming
the holder.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from cfbench.harness.errors import CfbenchError
from cfbench.harness.jsonl import append_jsonl, dumps, json_text, write_atomic, write_jsonl

RECORD_VERSION = 1
CONFIG = "run.json"
TRAJECTORIES = "trajectories.jsonl"
SEGMENTS = "segments.jsonl"
RESULTS = "results.json"
LOCK = ".lock"


# Where an input lives is not what it is: when its hash is recorded, a resume may find it elsewhere
# (another cache directory, a moved checkpoint) as long as the hash is the same.
MOVABLE = {("model", "model_location"): "weights_sha256", ("suite", "path"): "sha256", ("retriever", "corpus"): "corpus_sha256"}


def _identity(config: dict) -> dict:
    """The config without the locations of inputs that a recorded hash identifies."""
    config = json.loads(dumps(config))
    for (section, key), hash_key in MOVABLE.items():
        part = config.get(section)
        if isinstance(part, dict) and part.get(hash_key):
            part.pop(key, None)
    return config


def settings_difference(old: dict, new: dict) -> str | None:
    """The first setting two run configs differ in (`section.key: run has A, now B`), locations of hashed inputs aside."""
    return _diff(_identity(old), _identity(new))


def _diff(old: dict, new: dict, prefix: str = "") -> str | None:
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found = _diff(a, b, f"{prefix}{key}.")
            if found:
                return found
        elif a != b:
            return f"{prefix}{key}: run has {a!r}, now {b!r}"
    return None


KERNEL_FOLDERS = (Path("/proc"), Path("/sys"), Path("/dev"))


def check_out(out: Path, resume: bool) -> None:
    """--out checked before any model loads, each problem one line: not a kernel folder, not under a file, writable,
    and not a finished or started run unless resuming. (RunDir.open checks the rest, holding the lock.)"""
    where = out.expanduser().absolute()
    for kernel in KERNEL_FOLDERS:
        if where.is_relative_to(kernel) or where.resolve().is_relative_to(kernel):
            raise CfbenchError(f"--out {out} is under {kernel}, which the kernel provides; choose a folder of your own")
    if where.exists() and not where.is_dir():
        raise CfbenchError(f"--out {out} is a file, not a run directory; choose another --out")
    if (where / CONFIG).is_file() and not resume:
        raise CfbenchError(f"{out} already holds a run; pass --resume to continue it or choose another --out")
    existing = next(p for p in (where, *where.parents) if p.exists())
    if not existing.is_dir():
        raise CfbenchError(f"--out {out} is under {existing}, which is a file; choose another --out")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise CfbenchError(f"--out {out}: {existing} is not writable here (permissions or a read-only file system); choose another --out")


def lock_directory(path: Path) -> int:
    """Take the advisory lock of a directory one process writes at a time (an eval's run directory, a training run),
    holding the writer's PID in its `.lock`; returns the descriptor to pass to `unlock_directory`. A second writer is
    refused with a one-line error naming the holder, before it writes anything.

    fcntl.flock rather than the filelock package: the refusal names the holder's PID, which the holder writes into
    the file it locks, and filelock neither records nor reports one. The file is removed on unlock; a writer that
    locked a file removed meanwhile (its inode is no longer the path's) tries again."""
    lock = path / LOCK
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise CfbenchError(
                f"{path} is being written by process {holder}; wait for it to end (or stop it) before writing "
                "this run again, or choose another --out"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def unlock_directory(path: Path, fd: int) -> None:
    (path / LOCK).unlink(missing_ok=True)
    os.close(fd)


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.torn = False  # the record does not end in a whole line (a killed write): resume rewrites it
        self._lock: int | None = None

    def open(self, config: dict, resume: bool) -> dict[str, dict]:
        """Start or continue a run, holding the directory's lock until `close`; returns the finished trajectory rows by id."""
        config = {"record_version": RECORD_VERSION, **config}
        if self.path.exists() and not self.path.is_dir():
            raise CfbenchError(f"--out {self.path} is a file, not a run directory; choose another --out")
        self.path.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        try:
            return self._open(config, resume)
        except BaseException:
            self.close()
            raise

    def _take_lock(self) -> None:
        self._lock = lock_directory(self.path)

    def close(self) -> None:
        """Release the directory's lock (the process's end releases it too)."""
        if self._lock is not None:
            unlock_directory(self.path, self._lock)
            self._lock = None

    def _open(self, config: dict, resume: bool) -> dict[str, dict]:
        existing = self.path / CONFIG
        if existing.is_file():
            if not resume:
                raise CfbenchError(f"{self.path} already holds a run; pass --resume to continue it or choose another --out")
            old = json.loads(existing.read_text())
            mismatch = settings_difference(old, config)
            if mismatch:
                raise CfbenchError(f"{existing}: cannot resume, the settings differ ({mismatch}); use a new --out")
            return self._load_rows()
        if (self.path / TRAJECTORIES).exists():
            raise CfbenchError(f"{self.path} has {TRAJECTORIES} but no {CONFIG}; move it away or choose another --out")
        write_atomic(existing, dumps(config) + "\n")
        return {}

    def _load_rows(self) -> dict[str, dict]:
        path = self.path / TRAJECTORIES
        if not path.exists():
            return {}
        data = path.read_bytes()  # decoded line by line: a write killed inside a UTF-8 character tears only the last line
        self.torn = bool(data) and not data.endswith(b"\n")
        lines = data.split(b"\n")
        rows: dict[str, dict] = {}
        for lineno, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                if lineno >= len(lines) - 1:
                    self.torn = True
                    break
                raise CfbenchError(f"{path}:{lineno}: corrupt line inside the record; the run cannot be resumed safely") from None
            rows[row["id"]] = row
        return rows

    def keep_only(self, rows: list[dict]) -> None:
        """Rewrite the trajectories with exactly these rows (dropping torn lines and partial batches)."""
        write_jsonl(self.path / TRAJECTORIES, rows)

    def append(self, rows: list[dict]) -> None:
        repair_tail(self.path / TRAJECTORIES)
        append_jsonl(self.path / TRAJECTORIES, rows)

    def rows_written(self) -> int:
        """Whole rows in the record now (a line torn by a kill has no newline and does not count)."""
        path = self.path / TRAJECTORIES
        return path.read_bytes().count(b"\n") if path.exists() else 0

    def add_segment(self, segment: dict) -> list[dict]:
        """Record one working session (start, end, questions done); returns all of them."""
        repair_tail(self.path / SEGMENTS)
        append_jsonl(self.path / SEGMENTS, [segment])
        return [json.loads(line) for line in (self.path / SEGMENTS).read_text().splitlines() if line.strip()]

    def write_results(self, results: dict) -> None:
        write_atomic(self.path / RESULTS, json_text(results))


def repair_tail(path: Path, block: int = 1 << 16) -> None:
    """End the file at a whole line: a last line that is a whole JSON object gets its lost newline back, and
    anything else after the last newline (a torn write) is cut off. Reads only the tail, so big records stay cheap."""
    if not path.exists():
        return
    with path.open("rb+") as f:
        size = f.seek(0, os.SEEK_END)
        start, tail = size, b""
        while start > 0 and b"\n" not in tail:
            start -= min(block, start)
            f.seek(start)
            tail = f.read(size - start)
        cut = tail.rfind(b"\n") + 1
        last = tail[cut:]
        if not last:
            return
        try:
            whole = isinstance(json.loads(last), dict)
        except ValueError:  # torn JSON, or UTF-8 cut inside a character
            whole = False
        if whole:
            f.seek(size)
            f.write(b"\n")
        else:
            f.truncate(start + cut)
        f.flush()
        os.fsync(f.fileno())
