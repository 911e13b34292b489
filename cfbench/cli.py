"""The `cfbench` command: the one place that composes the layers' commands.

Layers point one way: evaluation (cfbench.harness) knows nothing of the leaderboard or training;
the leaderboard reads evaluation run records; training uses evaluation's agent loop and engines.
"""

from __future__ import annotations

import os
import sys
import warnings

import click
from rich.text import Text

from cfbench.harness.cli import COMMANDS as EVALUATION
from cfbench.harness.cli_output import console
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


_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click 8.2+; 8.1 shows the help without an error


class CfbenchGroup(click.Group):
    """The `cfbench` group: a usage error (a missing option, a value outside an option's choices) ends in one line on
    stderr and exit status 2, as every cfbench error does; click would print the usage and a hint around it. Done by
    running click's own main in its non-standalone mode (errors propagate) and reporting them here, since click has
    no setting for the form of its messages."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except _NO_ARGS_IS_HELP as e:  # `cfbench` alone: the help, as click shows it
            e.show()
            sys.exit(e.exit_code)
        except click.UsageError as e:
            hint = f" (see {e.ctx.command_path} --help)" if e.ctx is not None else ""
            message = e.format_message().rstrip(".") + hint
            console.print(Text("error: ", style="red") + Text(message), highlight=False, soft_wrap=True)
            sys.exit(e.exit_code)
        except click.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)  # an int is the code of a ctx.exit (--help, --version: 0)


@click.group(cls=CfbenchGroup)
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
