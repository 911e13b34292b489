"""`cfbench audit review` and `cfbench audit agreement`, beside `cfbench audit RUNS...` itself (training/audit/review.py)."""

from __future__ import annotations

import inspect
from pathlib import Path

import click

from cfbench.harness.cli_output import console, one_line_errors
from cfbench.harness.paths import shown
from cfbench.training.audit.cli import fill_sheet_cmd, split_sheet_cmd

_RUN = click.Path(exists=True, file_okay=False, path_type=Path)


class _DefaultContext(click.Context):
    """The default command's context: it is run as `cfbench audit RUNS...`, so its usage line and error hints say that,
    not `cfbench audit audit` (click names a subcommand's context after the word that chose it)."""

    @property
    def command_path(self) -> str:
        return self.parent.command_path if self.parent is not None else super().command_path


class AuditGroup(click.Group):
    """`cfbench audit RUNS... --judge SPEC` stays the audit; a first word naming a subcommand runs that instead.

    Written here rather than with the click-default-group package: that is one more dependency for these few lines.
    """

    def __init__(self, default: click.Command, **kwargs) -> None:
        help_text = (
            f"{inspect.cleandoc(default.help)}\n\nSubcommands review and agreement check the judge against a person, rename-judge "
            "renames a sheet judge's stored answers, split-sheet deals a sheet judge's waiting prompts to several annotators and "
            "fill-sheet checks and merges their answers back; "
            f"the audit's own options: cfbench audit RUN --help."
        )
        super().__init__(name=default.name, help=help_text, context_settings={"ignore_unknown_options": True}, **kwargs)
        self.default = default
        default.context_class = _DefaultContext

    def resolve_command(self, ctx: click.Context, args: list[str]):
        if args and args[0] in self.commands:
            return super().resolve_command(ctx, args)
        return self.default.name, self.default, args


@click.command("review")
@click.argument("run", type=_RUN)
@click.option("--sample", "n", type=click.IntRange(min=1), required=True, help="Judged questions to review (all when fewer).")
@click.option(
    "--judge", "spec", default="reference", show_default=True, help="The judge whose verdicts to review (as given to cfbench audit)."
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sample.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The page to write [default: RUN/judged/JUDGE/review.html].",
)
def review_cmd(run, n, spec, seed, out) -> None:
    """Write a static page (opens from disk) where a person marks the judge's verdicts on N sampled questions right or wrong."""
    from cfbench.training.audit.judge import judged_dir
    from cfbench.training.audit.review import sample, write_page

    with one_line_errors("nothing is kept; rerun the command"):
        judged = judged_dir(run, spec)
        items = sample(judged, n, seed)
        out = out or judged / "review.html"
        write_page(items, {"run": shown(run), "judge": spec, "sample": {"n": n, "seed": seed}}, out)
        console.print(f"review: {out} ({len(items)} questions, {sum(len(q['verdicts']) for q in items)} verdicts to mark)", highlight=False)


@click.command("agreement")
@click.argument("marks", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def agreement_cmd(marks) -> None:
    """Judge-human agreement and Cohen's kappa per verdict type, from a review page's exported marks."""
    from cfbench.training.audit.review import agreement, table

    with one_line_errors("nothing is kept; rerun the command"):
        click.echo(table(agreement(marks)))


@click.command("rename-judge")
@click.argument("old")
@click.argument("new")
@click.argument("paths", nargs=-1, required=True, type=_RUN)
def rename_judge_cmd(old, new, paths) -> None:
    """Rename sheet judge OLD to NEW (sheet:NAME) in the runs, reports and replays under PATHS: folders, sheet keys, records."""
    from cfbench.training.audit.rename import rename_sheet_judge

    with one_line_errors("nothing was changed; rerun the command"):
        done = rename_sheet_judge(old, new, list(paths))
        console.print(
            f"{old} -> {new}: {done['folders']} folders renamed, {done['files']} files rewritten, {done['rekeyed']} sheet rows re-keyed",
            highlight=False,
        )


@click.command("compare-judges")
@click.argument("runs", nargs=-1, required=True, type=_RUN)
@click.option("--judge", "specs", multiple=True, required=True, help="A judge the runs were audited with (give exactly two).")
def compare_judges_cmd(runs, specs) -> None:
    """How far two judges agree on the same audited questions: references resolved, same answers, verdicts (a Markdown table)."""
    from cfbench.harness.errors import CfbenchError
    from cfbench.training.audit.judges_agree import compare, table

    with one_line_errors("nothing is kept; rerun the command"):
        if len(specs) != 2:
            raise CfbenchError(f"--judge: give exactly two judges to compare, got {len(specs)}")
        click.echo(table(compare(list(runs), *specs)), nl=False)


def audit_group(audit_cmd: click.Command) -> click.Group:
    group = AuditGroup(audit_cmd)
    group.add_command(review_cmd)
    group.add_command(agreement_cmd)
    group.add_command(rename_judge_cmd)
    group.add_command(compare_judges_cmd)
    group.add_command(split_sheet_cmd)
    group.add_command(fill_sheet_cmd)
    return group
