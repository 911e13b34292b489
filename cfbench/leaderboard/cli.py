"""`cfbench leaderboard add|build|rescore|verify|export` and `cfbench compare`."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cfbench.harness.cli_output import console, one_line_errors
from cfbench.harness.errors import CfbenchError
from cfbench.harness.metrics import GROUPS, METRICS

ROOT = Path("leaderboards")
_root = click.option(
    "--root", type=click.Path(path_type=Path), default=ROOT, show_default=True, help="Folder of leaderboards, one subfolder per suite."
)


@click.group()
def leaderboard() -> None:
    """Store runs and build the per-suite leaderboards (tables, CSV, LaTeX, a static page).

    \b
    Examples:
      cfbench leaderboard add runs/mine --name "SmolLM2-135M mine" --treatment Search-R1 --scale 135M
      cfbench leaderboard build                       # regenerate every suite's tables and page
      cfbench leaderboard rescore                     # check the published tables against the stored predictions
      cfbench leaderboard export runs/mine --out lmeval/results_mine.json   # lm-eval's layout, with samples_*.jsonl
    """


def _suite_names(suites: tuple[str, ...], root: Path) -> list[str]:
    """The suites named by --suite, or every leaderboard folder in root."""
    from cfbench.leaderboard.store import check_suite_name

    names = list(suites) or (sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else [])
    if not names:
        raise CfbenchError(f"{root}: no leaderboards here; add a run first (cfbench leaderboard add RUN_DIR)")
    return [check_suite_name(name, "--suite") for name in names]


@leaderboard.command("add")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--name", default=None, help="Row label [default: the model id].")
@click.option("--treatment", default=None, help="Treatment label shown in the tables (free text), e.g. Base, Search-R1, CrossFit.")
@click.option("--scale", default=None, help="Model size label shown in the tables (free text), e.g. 135M, 4B.")
@click.option("--config", default=None, help="Training configuration label (cfbench train --scale), e.g. cpu, paper; 'untrained' for none.")
@_root
def add_cmd(run_dir, name, treatment, scale, config, root) -> None:
    """Store a finished run's results and per-question scores under ROOT/<suite>/runs/ (adding twice changes nothing)."""
    from cfbench.leaderboard.store import add, load_run

    with one_line_errors():
        entry, new = add(load_run(run_dir), root, {"name": name, "treatment": treatment, "scale": scale, "config": config})
        console.print(
            f"{'stored' if new else 'already stored'}: {entry}; now run cfbench leaderboard build", highlight=False, soft_wrap=True
        )


@leaderboard.command("build")
@click.option("--suite", "suites", multiple=True, help="Build only this suite's leaderboard (repeatable) [default: every folder in ROOT].")
@click.option(
    "--reference",
    default=None,
    help="The run deltas and p are against (its id, a unique id prefix or its name); kept in the suite's leaderboard.json "
    "[default: the one leaderboard.json names, else none].",
)
@_root
def build_cmd(suites, reference, root) -> None:
    """Regenerate README.md, results.json/.csv/.tex and index.html of each suite from its stored runs."""
    from cfbench.leaderboard.build import build

    with one_line_errors():
        names = _suite_names(suites, root)
        if reference is not None and len(names) != 1:
            raise CfbenchError(f"--reference {reference}: names a run of one suite; add --suite SUITE ({', '.join(names)})")
        for name, board in zip(names, build([root / name for name in names], reference)):
            runs = sum(len(r["members"]) for t in board["tables"] for r in t["runs"]) + len(board["scores_only"])
            console.print(f"{root / name}: {runs} runs", highlight=False, soft_wrap=True)
            for i, table in enumerate(board["tables"][1:], start=1):
                labels = ", ".join(f"{m['name']} ({m['id']})" for r in table["runs"] for m in r["members"])
                console.print(
                    f"  set apart ({i}): {labels}: {'; '.join(table['set_apart_because'])} (this group vs the ranked runs)",
                    highlight=False,
                    soft_wrap=True,
                )


@leaderboard.command("rescore")
@click.option("--suite", "suites", multiple=True, help="Rescore only this suite (repeatable) [default: every folder in ROOT].")
@_root
def rescore_cmd(suites, root) -> None:
    """Recompute every stored run's scores from its predictions and check the published tables are exactly what they give."""
    from cfbench.leaderboard.build import leftover_pages, outputs

    with one_line_errors():
        for name in _suite_names(suites, root):
            board, files = outputs(root / name)
            stale = [
                f for f, text in files.items() if not (root / name / f).is_file() or (root / name / f).read_text(encoding="utf-8") != text
            ]
            stale += leftover_pages(root / name, files)
            if stale:
                raise CfbenchError(
                    f"{root / name}: {', '.join(stale)} differ from what the stored predictions give; run cfbench leaderboard build"
                )
            rescored = sum(len(r["members"]) for t in board["tables"] for r in t["runs"])
            console.print(
                f"{root / name}: {rescored} runs rescored from their predictions, {len(board['scores_only'])} scores only; "
                "tables identical",
                highlight=False,
                soft_wrap=True,
            )


@leaderboard.command("verify")
@click.argument("entry", type=click.Path(path_type=Path))
@click.option("--sample", type=click.IntRange(min=1), default=20, show_default=True, help="Questions to generate again.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the draw of questions.")
@click.option("--ckpt", default=None, help="The entry's checkpoint, where not at the recorded place [default: the recorded --ckpt].")
def verify_cmd(entry, sample, seed, ckpt) -> None:
    """Generate a random sample of a stored entry's questions again with its recorded settings and compare byte for byte."""
    from cfbench.harness.cli_output import job_progress
    from cfbench.leaderboard.verify import verify

    with one_line_errors("nothing is saved; rerun the command"):
        with job_progress(f"verify {entry.name}", "q", sample) as progress:
            progress.start(sample, 0)
            verdict = verify(entry, sample, seed=seed, ckpt=ckpt, on_questions=lambda n: progress.update(advance=n))
        notes = f" ({'; '.join(verdict.notes)})" if verdict.notes else ""
        summary = f"{entry}: {verdict.identical} of {len(verdict.sampled)} sampled questions (seed {seed}) generated again byte-identical"
        if verdict.differing:
            raise CfbenchError(f"{summary}; differ: {', '.join(verdict.differing)}{notes}")
        console.print(summary + notes, highlight=False, soft_wrap=True)


@leaderboard.command("export")
@click.argument("run", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), required=True, help="File to write (JSON).")
def export_cmd(run, out) -> None:
    """Write a run (a run directory or a stored entry) in lm-evaluation-harness's results layout, and beside it each
    task's questions as lm-eval's --log_samples writes them (samples_<task>_<date id>.jsonl).

    \b
    Example:
      cfbench leaderboard export runs/mine --out lmeval/mine/results_2026-01-02T03-04-05.json
    """
    from cfbench.harness.jsonl import json_text, write_atomic
    from cfbench.leaderboard.lmeval import lmeval_results, sample_files
    from cfbench.leaderboard.store import load_run

    with one_line_errors():
        the_run = load_run(run)
        files = {out: json_text(lmeval_results(the_run))} | sample_files(out, the_run)
        out.parent.mkdir(parents=True, exist_ok=True)
        for path, text in files.items():
            write_atomic(path, text)
        kept = f"; per-sample files: {len(files) - 1} beside it" if len(files) > 1 else "; no per-sample files (a scores-only entry)"
        console.print(f"lm-eval results: {out}{kept}", highlight=False, soft_wrap=True)


@click.command("compare")
@click.argument("run_a", type=click.Path(path_type=Path))
@click.argument("run_b", type=click.Path(path_type=Path))
@click.option("--metric", type=click.Choice(METRICS), default="cover_em", show_default=True, help="The metric compared.")
def compare_cmd(run_a, run_b, metric) -> None:
    """Per-benchmark A - B with paired-bootstrap 95% intervals and p-values, on the questions both runs answered.

    Runs compare when they share suite, protocol knobs, metric version, retriever and --limit (or both have none).

    \b
    Example:
      cfbench compare runs/trained runs/base --metric f1
    """
    from cfbench.harness import stats
    from cfbench.leaderboard import comparable
    from cfbench.leaderboard.store import load_run
    from cfbench.leaderboard.tables import column_label, pct, signed

    with one_line_errors():
        a, b = load_run(run_a), load_run(run_b)
        reasons = comparable.differences(comparable.key(a.results), comparable.key(b.results))
        if reasons:
            raise CfbenchError(
                f"{run_a} and {run_b} are not comparable ({'; '.join(reasons)}); compare runs of one suite, protocol, "
                "metric version and retriever"
            )
        shared = {r["id"] for r in a.rows} & {r["id"] for r in b.rows}
        if not shared:
            raise CfbenchError(f"{run_a} and {run_b} share no question ids; pairing needs the same questions")
        table = Table(
            title=escape(
                f"{metric}: A = {a.labels['name']} ({a.id}), B = {b.labels['name']} ({b.id}); "
                f"paired bootstrap, {stats.RESAMPLES} resamples, seed {stats.SEED}"
            )  # a label is the user's text: never markup
        )
        for column in ("benchmark", "n", "A", "B", "A - B", "95% interval", "p"):
            table.add_column(column, justify="left" if column == "benchmark" else "right")
        results = stats.paired(a.rows, b.rows)
        first_average = next((name for name in results if name in GROUPS), None)
        for name, result in results.items():
            r = result[metric]
            if name == first_average:
                table.add_section()
            table.add_row(
                column_label(name),
                str(r["n"]),
                pct(r["a"]),
                pct(r["b"]),
                signed(r["delta"]),
                escape(f"[{signed(r['lo'])}, {signed(r['hi'])}]"),
                f"{r['p']:.3f}",
            )
        Console().print(table)
