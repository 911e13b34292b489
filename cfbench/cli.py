"""The `cfbench` command: the one place that composes the layers' commands.

Layers point one way: evaluation (cfbench.harness) knows nothing of the leaderboard or training;
the leaderboard reads evaluation run records; training uses evaluation's agent loop and engines.
"""

from __future__ import annotations

import click

from cfbench.harness.cli import COMMANDS as EVALUATION
from cfbench.leaderboard.cli import compare_cmd, leaderboard
from cfbench.training.audit.cli import audit_cmd, replay_cmd
from cfbench.training.audit.review_cli import audit_group
from cfbench.training.cli import train_cmd


@click.group()
@click.version_option(package_name="cfbench")
def main() -> None:
    """cfbench: a reproducible benchmark and training harness for search agents."""


for command in (*EVALUATION, leaderboard, compare_cmd, train_cmd, audit_group(audit_cmd), replay_cmd):
    main.add_command(command)

if __name__ == "__main__":
    main()
