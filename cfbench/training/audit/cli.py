"""`cfbench audit`, `cfbench replay`, and `cfbench audit split-sheet` / `fill-sheet` for a sheet judge's annotators."""

from __future__ import annotations

from pathlib import Path

import click

from cfbench.harness.cli_output import console, job_progress, one_line_errors
from cfbench.training.audit.replay import VARIANTS

_JUDGE_HELP = (
    "openai:MODEL@URL (an OpenAI-compatible server), openai:MODEL (the hosted OpenAI API), hf:MODEL_OR_DIR (in process), "
    "sheet:NAME (answers NAME writes into sheet.jsonl: RUN/judged/sheet-NAME/ for audit, --out for replay) "
    "or reference (gold answers in the corpus)."
)
_RUN = click.Path(exists=True, file_okay=False, path_type=Path)


def _openai_judge_options(command):
    """--api-key, --reasoning-effort and --max-output-tokens, the settings of an openai: judge, on `command`."""
    command = click.option(
        "--max-output-tokens",
        type=click.IntRange(min=1),
        default=None,
        help="openai: judge output-token budget, thinking included [default: 192 per reference, 8 per verdict].",
    )(command)
    command = click.option(
        "--reasoning-effort", default=None, help="openai: judge reasoning effort for reasoning models (e.g. minimal, low, medium, high)."
    )(command)
    return click.option("--api-key", default=None, help="openai: judge key [default: $OPENAI_API_KEY; none for a local server].")(command)


def _answers_from_option(command):
    return click.option(
        "--answers-from",
        "donors",
        multiple=True,
        type=_RUN,
        help="sheet: judges: answer prompts still open with what this judge wrote for the same prompts in RUN's audit sheet "
        "(copied into this sheet, marked copied_from); repeat for several, the first listed first.",
    )(command)


def _borrow(judge, spec: str, donors: tuple[Path, ...], openai_settings: dict) -> None:
    """Give a sheet judge the answers of other runs' audit sheets (--answers-from)."""
    from cfbench.harness.errors import CfbenchError
    from cfbench.training.audit.judge import SHEET_FILE, SheetJudge, judged_dir

    if not donors:
        return
    if not isinstance(judge, SheetJudge):
        raise CfbenchError(f"--answers-from is for sheet:NAME judges, not --judge {spec!r}")
    judge.borrow([judged_dir(donor, spec, openai_settings["reasoning_effort"]) / SHEET_FILE for donor in donors])


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _judge(spec: str, run: Path, out: Path, openai_settings: dict):
    from cfbench.training.audit.audit import CACHE_FILE, run_config
    from cfbench.training.audit.judge import judge_for
    from cfbench.training.selfevolve.sources import corpus_path

    return judge_for(spec, corpus_path(run_config(run)), out / CACHE_FILE, **openai_settings)


@click.command("audit")
@click.argument("runs", nargs=-1, required=True, type=_RUN)
@click.option("--judge", "spec", required=True, help=_JUDGE_HELP)
@click.option(
    "--report",
    type=click.Path(path_type=Path),
    default=None,
    help="Directory for the tables, trajectory plot and cost report across RUNS [default, one run: its judged/JUDGE/].",
)
@_answers_from_option
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Torch CPU threads for an hf judge (default: torch's).")
@_openai_judge_options
def audit_cmd(runs, spec, report, donors, threads, **openai_settings) -> None:
    """Judge self-evolution runs' saved steps: T_P, T_S, A, F, L per step and round, plots and costs.

    Each run's judgements go to RUN/judged/JUDGE/ (with the judge's cache: a rerun sends no request).
    """
    from cfbench.training.audit.audit import audit_run, saved_steps
    from cfbench.training.audit.judge import AnswersWaiting, judged_dir
    from cfbench.training.audit.report import write_report

    if threads:
        import torch

        torch.set_num_threads(threads)
    from cfbench.harness.errors import CfbenchError

    with one_line_errors("judge answers so far are cached; rerun the same command to continue"):
        if report is None and len(runs) > 1:
            raise CfbenchError(f"{len(runs)} runs need --report DIR for their side-by-side tables")
        records, waiting = [], []
        for run in runs:
            out = judged_dir(run, spec, openai_settings["reasoning_effort"])
            judge = _judge(spec, run, out, openai_settings)
            _borrow(judge, spec, donors, openai_settings)
            with job_progress(f"{run}: judged", "step", fields={"last": ""}) as progress:
                progress.start(len(saved_steps(run)), 0)
                try:
                    record = audit_run(run, judge, out, on_step=lambda step: progress.update(advance=1, last=step))
                except AnswersWaiting as err:  # a sheet judge: collect every run's waiting prompts in one pass
                    waiting.append(err)
                    continue
            console.print(
                f"{run}: {record['label']}, {len(record['steps'])} steps, judge requests {judge.needed} "
                f"({judge.sent} sent, {judge.needed - judge.sent} from the cache"
                + (f", {judge.copied} of them copied from --answers-from" if donors else "")
                + f") -> {out}",
                highlight=False,
            )
            records.append(record)
        if waiting:
            raise AnswersWaiting([w for err in waiting for w in err.waits])
        report = report or judged_dir(runs[0], spec, openai_settings["reasoning_effort"])
        write_report(records, list(runs), report)
        click.echo((report / "audit.md").read_text() + "\n" + (report / "cost.md").read_text())
        console.print(f"report: {report} (audit.md, audit.csv, steps.csv, trajectory.png, cost.md)", highlight=False)


@click.command("replay")
@click.argument("run", type=_RUN)
@click.option(
    "--bank", type=click.IntRange(min=1), required=True, help="Replay N questions and labels the run trained on, drawn round by round."
)
@click.option(
    "--feedback",
    "variants",
    type=click.Choice(list(VARIANTS)),
    multiple=True,
    required=True,
    help="Feedback solver provenance; repeat for several.",
)
@click.option("--judge", "spec", default="reference", show_default=True, help=_JUDGE_HELP)
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Replay directory, one per judge (trained variants are kept).")
@click.option(
    "--epochs",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Passes of the feedback solvers over their share of the bank.",
)
@_answers_from_option
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Torch CPU threads (default: torch's).")
@_openai_judge_options
def replay_cmd(run, bank, variants, spec, out, epochs, donors, threads, **openai_settings) -> None:
    """Replay saved questions and labels, varying only the feedback solver's training provenance; report F per variant."""
    from cfbench.training.audit.replay import replay
    from cfbench.training.core.learner import end_processes

    if threads:
        import torch

        torch.set_num_threads(threads)
    with one_line_errors("finished variants, the feedback solvers' answers and judge answers are kept; rerun the same command to continue"):
        judge = _judge(spec, run, out, openai_settings)
        _borrow(judge, spec, donors, openai_settings)
        summary = replay(
            run,
            bank,
            list(dict.fromkeys(variants)),
            judge,
            out,
            epochs,
            on_variant=lambda v, r: console.print(
                f"{v}: F {_num(r['F'])}  A {_num(r['A'])}  coverage {_num(r['coverage'])}", highlight=False
            ),
        )
        click.echo((out / "replay.md").read_text())
        console.print(f"replay: {out} ({len(summary['variants'])} variants)", highlight=False)
        end_processes()


@click.command("split-sheet")
@click.argument("run", type=_RUN)
@click.option("--judge", "spec", required=True, help="The sheet judge whose waiting prompts to deal (sheet:NAME).")
@click.option("--shares", type=click.IntRange(min=1), required=True, help="Share files to deal the prompts into, one per annotator.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the shuffle and of the ids.")
@click.option(
    "--out", type=click.Path(path_type=Path), required=True, help="A new directory for the share files and the manifest mapping them back."
)
def split_sheet_cmd(run, spec, shares, seed, out) -> None:
    """Shuffle the prompts RUN's audit waits on in a sheet judge's sheet and deal them into share files, one per annotator.

    Each share-k.jsonl holds rows {id, prompt, output: null}, the id opaque; annotators write each output as its prompt
    asks, and `cfbench audit fill-sheet` checks and merges the answers into the sheet.
    """
    from cfbench.training.audit.sheet_shares import split_sheet

    with one_line_errors("nothing was written; rerun the command"):
        manifest = split_sheet(run, spec, shares, seed, out)
        unused = f"; {manifest['unused_rows']} rows no question asks now left out" if manifest["unused_rows"] else ""
        console.print(
            f"{manifest['prompts']} waiting prompts of {manifest['sheet']} dealt into {shares} shares in {out}{unused}",
            highlight=False,
            soft_wrap=True,
        )


@click.command("fill-sheet")
@click.argument("run", type=_RUN)
@click.option("--judge", "spec", required=True, help="The sheet judge the split was dealt for (sheet:NAME).")
@click.argument("split", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("answers", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
def fill_sheet_cmd(run, spec, split, answers) -> None:
    """Check the answers to a split-sheet SPLIT (its share files, or the answered ANSWERS files) and write them all into the sheet.

    A reference must quote one of its question's documents or say unresolved, a verdict must read yes or no; any problem,
    a missing answer or a split the sheet has moved past is listed, one line each, and the sheet is left unchanged.
    """
    from cfbench.training.audit.sheet_shares import AnswersRefused, fill_sheet

    with one_line_errors("the sheet is unchanged; rerun the command"):
        try:
            filled = fill_sheet(run, spec, split, list(answers))
        except AnswersRefused as err:
            for problem in err.problems:
                console.print(problem, highlight=False, soft_wrap=True)
            raise
        console.print(
            f"{filled} answers written into the sheet; run `cfbench audit {run} --judge {spec}` to go on", highlight=False, soft_wrap=True
        )
