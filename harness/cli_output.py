"""What every cfbench command shares: the stderr console and the one-line error exit."""

from __future__ import annotations

import sys

from rich.console import Console

from harness.errors import CfbenchError

console = Console(stderr=True)


class one_line_errors:
    """Turn a CfbenchError into one line on stderr and exit 2; Ctrl-C into a resume hint and exit 130."""

    def __init__(self, resume_hint: str = "finished batches are saved; rerun with --resume to continue") -> None:
        self.resume_hint = resume_hint

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if kind is not None and issubclass(kind, CfbenchError):
            console.print(f"[red]error:[/red] {err}", highlight=False, soft_wrap=True)
            sys.exit(2)
        if kind is KeyboardInterrupt:
            console.print(f"interrupted: {self.resume_hint}", highlight=False)
            sys.exit(130)
        return False
