"""What every cfbench command shares: the stderr console and the one-line error exit."""

from __future__ import annotations

import signal
import sys
import threading

from rich.console import Console

from cfbench.harness.errors import CfbenchError

console = Console(stderr=True)


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
            console.print(f"[red]error:[/red] {err}", highlight=False, soft_wrap=True)
            sys.exit(2)
        if kind is KeyboardInterrupt:
            console.print(f"interrupted: {self.resume_hint}", highlight=False)
            sys.exit(130)
        return False
