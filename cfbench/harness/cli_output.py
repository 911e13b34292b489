"""What every cfbench command shares: the stderr console, the one-line error exit and the progress of long jobs."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text

from cfbench.harness.errors import CfbenchError

# markup=False: messages carry user text and install hints such as pip install 'cfbench[vllm]', which rich markup would
# read as a style tag and drop; nothing cfbench prints to this console is markup.
console = Console(stderr=True, markup=False)


def _terminated(signum, frame):
    raise KeyboardInterrupt


class one_line_errors:
    """Turn a CfbenchError into one line on stderr and exit 2; Ctrl-C or SIGTERM (a scheduler's or
    `kill`'s stop) into a resume hint and exit 130, after the command's own cleanup has run."""

    def __init__(self, resume_hint: str = "finished batches are saved; rerun with --resume to continue") -> None:
        self.resume_hint = resume_hint
        self.previous = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, _terminated)
        return self

    def __exit__(self, kind, err, tb):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
        if kind is not None and issubclass(kind, CfbenchError):
            console.print(Text("error: ", style="red") + Text(str(err)), highlight=False, soft_wrap=True)
            sys.exit(2)
        if kind is KeyboardInterrupt:
            console.print(f"interrupted: {self.resume_hint}", highlight=False)
            sys.exit(130)
        return False


class JobProgress:
    """Progress of a long job (eval questions, training steps, audited steps): a rich bar on a terminal, and elsewhere
    (CI, nohup, a pipe: there a bar prints nothing until the end) one plain line per update: done/total, rate, ETA.

    Rate and ETA count from `start` (or the first update), so a resumed job's earlier work does not inflate them.
    """

    def __init__(self, description: str, unit: str, total: int | None, fields: dict, bar: Progress | None, quiet: bool) -> None:
        self.description, self.unit, self.total, self.fields, self.bar, self.quiet = description, unit, total, dict(fields), bar, quiet
        self.done, self._since = 0, None
        self._task = bar.add_task(description, total=total, rate="", **self.fields) if bar else None

    def start(self, total: int, done: int) -> None:
        self.total, self.done, self._since = total, done, (done, time.monotonic())
        if self.bar:
            self.bar.update(self._task, total=total, completed=done)

    def update(self, advance: int = 0, completed: int | None = None, **fields) -> None:
        """Move to `completed` (or by `advance`) and set fields; a call that moves nothing only sets fields (no line)."""
        moved = bool(advance) or completed is not None
        self.fields.update(fields)
        self.done = completed if completed is not None else self.done + advance
        if self.bar:
            self.bar.update(self._task, completed=self.done, rate=self._rate_text(), **self.fields)
        elif moved and not self.quiet:
            console.print(self.line(), highlight=False, soft_wrap=True)
        if self._since is None and moved:
            self._since = (self.done, time.monotonic())

    def rate(self) -> float | None:
        """Units per second since `start` or the first update; None until some have passed."""
        if self._since is None or self.done <= self._since[0]:
            return None
        return (self.done - self._since[0]) / max(time.monotonic() - self._since[1], 1e-9)

    def _rate_text(self) -> str:
        rate = self.rate()
        if not rate:
            return ""
        return f"{rate:.2f} {self.unit}/s" if rate >= 1 else f"{1 / rate:.1f} s/{self.unit}"

    def line(self) -> str:
        """`DESCRIPTION: done/total UNIT (pct%)  rate  ETA h:mm:ss  field value ...`, for a log."""
        head = f"{self.description}: {self.done}/{self.total if self.total is not None else '?'} {self.unit}"
        parts = [head + (f" ({100 * self.done / self.total:.0f}%)" if self.total else "")]
        rate = self.rate()
        if rate:
            parts.append(self._rate_text())
            if self.total:
                left = round(max(self.total - self.done, 0) / rate)
                parts.append(f"ETA {left // 3600}:{left // 60 % 60:02d}:{left % 60:02d}")
        return "  ".join(parts + [f"{name} {value}" for name, value in self.fields.items() if value != ""])


@contextlib.contextmanager
def job_progress(
    description: str, unit: str, total: int | None = None, *, fields: dict | None = None, transient: bool = False, quiet: bool = False
):
    """A JobProgress for a job (`quiet`: shows nothing, e.g. on a non-main training process). `fields` (name -> first
    value) follow the count. Plain lines unless both stdout and the stderr console are terminals: under nohup, CI or
    `| tee` one of them is a file or a pipe, and the log is what is read there."""
    fields = fields or {}
    if quiet or not (sys.stdout.isatty() and console.is_terminal):
        yield JobProgress(description, unit, total, fields, None, quiet)
        return
    columns = (
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        *(TextColumn(f"{name} {{task.fields[{name}]}}", markup=False) for name in fields),
        TextColumn("{task.fields[rate]}", markup=False),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=transient) as bar:
        yield JobProgress(description, unit, total, fields, bar, quiet)
