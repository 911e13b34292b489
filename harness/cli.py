"""The `cfbench` command."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from harness.errors import CfbenchError
from harness.paths import BUNDLED_CORPUS
from harness.protocol import Knobs

console = Console(stderr=True)
DEFAULTS = Knobs()


@click.group()
@click.version_option(package_name="cfbench")
def main() -> None:
    """cfbench: a reproducible benchmark and training harness for search agents."""


@main.command("eval")
@click.option("--ckpt", required=True, help="Local HF checkpoint dir, a bundled model (smollm2-135m) or a hub id.")
@click.option("--suite", default="fixed1325", show_default=True, help="Bundled suite (fixed1325, mini, full) or a FlashRAG-style jsonl file.")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Run directory (trajectories, results).")
@click.option("--resume", is_flag=True, help="Continue the run in --out without redoing finished questions.")
@click.option("--corpus", type=click.Path(path_type=Path), default=BUNDLED_CORPUS, show_default="bundled corpus", help="Passages as jsonl(.gz).")
@click.option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True, help="Trajectories stepped together.")
@click.option("--topk", type=int, default=DEFAULTS.topk, show_default=True)
@click.option("--max-searches", type=int, default=DEFAULTS.max_searches, show_default=True)
@click.option("--max-new-tokens", type=int, default=DEFAULTS.max_new_tokens, show_default=True)
@click.option("--max-obs-tokens", type=int, default=DEFAULTS.max_obs_tokens, show_default=True)
@click.option("--max-context-tokens", type=int, default=DEFAULTS.max_context_tokens, show_default=True)
@click.option("--device", default="cpu", show_default=True)
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default="float32", show_default=True)
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Torch CPU threads (default: torch's).")
@click.option("--seed", type=int, default=0, show_default=True)
def eval_cmd(ckpt, suite, out, resume, corpus, batch_size, topk, max_searches, max_new_tokens, max_obs_tokens,
             max_context_tokens, device, dtype, threads, seed) -> None:
    """Evaluate a checkpoint on a suite under protocol v1 and print Cover-EM tables."""
    from harness.backends.hf import HFBackend
    from harness.checkpoints import resolve
    from harness.corpus import load_corpus
    from harness.evaluate import evaluate
    from harness.report import results_table
    from harness.retrievers.bm25 import BM25Retriever
    from harness.suite import load_suite

    with _errors():
        knobs = Knobs(topk, max_searches, max_new_tokens, max_obs_tokens, max_context_tokens)
        the_suite = load_suite(suite)
        retriever = BM25Retriever(load_corpus(corpus))
        backend = HFBackend(resolve(ckpt), device=device, dtype=dtype, threads=threads)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[searches]} searches"), TextColumn("{task.fields[rate]}"),
                   TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
        with Progress(*columns, console=console) as progress:
            task = progress.add_task(f"{the_suite.name}", total=None, searches=0, rate="")

            def on_start(total: int, done: int) -> None:
                progress.update(task, total=total, completed=done)

            def on_questions(n: int) -> None:
                progress.advance(task, n)
                speed = progress.tasks[task].speed
                progress.update(task, rate=f"{speed:.2f} q/s" if speed else "")

            def on_searches(n: int) -> None:
                progress.update(task, searches=progress.tasks[task].fields["searches"] + n)

            results = evaluate(the_suite, backend, retriever, knobs, out, batch_size=batch_size, seed=seed,
                               resume=resume, on_start=on_start, on_questions=on_questions, on_searches=on_searches)
        Console().print(results_table(results))
        console.print(f"run record: {out}")


class _errors:
    """Turn a CfbenchError into one line on stderr and exit 2; Ctrl-C into a resume hint and exit 130."""

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if kind is not None and issubclass(kind, CfbenchError):
            console.print(f"[red]error:[/red] {err}", highlight=False, soft_wrap=True)
            sys.exit(2)
        if kind is KeyboardInterrupt:
            console.print("interrupted: finished batches are saved; rerun with --resume to continue", highlight=False)
            sys.exit(130)
        return False


if __name__ == "__main__":
    main()
