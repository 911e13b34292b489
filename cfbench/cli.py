"""The `cfbench` command: the one place that composes the layers' commands.

Layers point one way: evaluation (cfbench.harness) knows nothing of the leaderboard or training;
the leaderboard reads evaluation run records; training uses evaluation's agent loop and engines.
"""

from __future__ import annotations

import os
import warnings

import click

from cfbench.harness.cli import COMMANDS as EVALUATION
from cfbench.leaderboard.cli import compare_cmd, leaderboard
from cfbench.training.audit.cli import audit_cmd, replay_cmd
from cfbench.training.audit.review_cli import audit_group
from cfbench.training.cli import train_cmd


def quiet_third_parties() -> None:
    """Keep cfbench's output cfbench's: no progress bars of the Hugging Face libraries (transformers' "Loading weights"
    among them), no messages of transformers' logger below errors, and no deprecation notices (FutureWarning,
    DeprecationWarning) raised inside other packages, which a user cannot act on. Set before any of them is imported
    (commands import them lazily); a variable the user set wins, e.g. TRANSFORMERS_VERBOSITY=info to see them again."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category, module=r"(?!cfbench\b)")


@click.group()
@click.version_option(package_name="cfbench")
def main() -> None:
    """cfbench: a reproducible benchmark and training harness for search agents.

    \b
    Examples:
      cfbench eval --ckpt smollm2-135m-search --suite mini --out runs/mini
      cfbench leaderboard add runs/mini --treatment Search-R1 --scale 135M && cfbench leaderboard build
      cfbench train --treatment search-r1 --scale cpu-smoke --out runs/train
    """
    quiet_third_parties()


for command in (*EVALUATION, leaderboard, compare_cmd, train_cmd, audit_group(audit_cmd), replay_cmd):
    main.add_command(command)

if __name__ == "__main__":
    main()
