"""The `cfbench` command."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from harness.errors import CfbenchError
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
@click.option("--retriever", "retriever_spec", default="bm25", show_default=True,
              help="bm25, dense or lucene over --corpus, an index directory, a Search-R1-style server URL, or replay:RUN_DIR.")
@click.option("--corpus", type=click.Path(path_type=Path), default=None, help="Passages as jsonl(.gz) [default: bundled corpus].")
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
def eval_cmd(ckpt, suite, out, resume, retriever_spec, corpus, batch_size, topk, max_searches, max_new_tokens, max_obs_tokens,
             max_context_tokens, device, dtype, threads, seed) -> None:
    """Evaluate a checkpoint on a suite under protocol v1 and print Cover-EM tables."""
    from harness.backends.hf import HFBackend
    from harness.checkpoints import resolve
    from harness.evaluate import evaluate
    from harness.report import results_table
    from harness.retrievers.choose import retriever_for
    from harness.suite import load_suite

    with _errors():
        knobs = Knobs(topk, max_searches, max_new_tokens, max_obs_tokens, max_context_tokens)
        the_suite = load_suite(suite)
        retriever = retriever_for(retriever_spec, corpus)
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


@main.group()
def index() -> None:
    """Build retrieval indexes."""


@index.command("build")
@click.option("--corpus", type=click.Path(path_type=Path), required=True, help="Passages as jsonl(.gz): id+contents or id+title+text.")
@click.option("--kind", required=True, help="bm25, dense or lucene.")
@click.option("--encoder", default="minilm", show_default=True, help="Dense encoder: minilm (offline), e5-base-v2 (hub), or a model dir/id.")
@click.option("--hnsw-m", type=click.IntRange(min=0), default=0, show_default=True, help="Dense: HNSW graph degree (0 = exact flat search).")
@click.option("--dtype", default="float32", show_default=True, help="Dense: stored embedding type, float32 or float16.")
@click.option("--out", type=click.Path(path_type=Path), required=True)
def index_build(corpus, kind, encoder, hnsw_m, dtype, out) -> None:
    """Build an index directory with a manifest (corpus hash, kind, parameters, build time)."""
    from harness.corpus import load_corpus
    from harness.retrievers.index import build_index, read_manifest

    with _errors():
        build_index(load_corpus(corpus), kind, out, encoder=encoder, hnsw_m=hnsw_m, dtype=dtype)
        manifest = read_manifest(out)
        console.print(f"built {kind} index of {manifest['corpus']['n']} passages in {manifest['build_seconds']} s: {out}")


@main.group()
def retriever() -> None:
    """Serve retrieval over HTTP."""


@retriever.command("serve")
@click.option("--index", "index_dir", type=click.Path(path_type=Path), required=True, help="An index directory.")
@click.option("--corpus", type=click.Path(path_type=Path), default=None, help="The corpus [default: the one in the manifest].")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True)
def retriever_serve(index_dir, corpus, host, port) -> None:
    """Answer Search-R1's POST /retrieve (and GET /health) from an index."""
    from harness.corpus import load_corpus
    from harness.retrievers.index import open_index
    from harness.server import serve

    with _errors():
        retriever_ = open_index(index_dir, load_corpus(corpus) if corpus else None)
        console.print(f"serving {index_dir} on http://{host}:{port}/retrieve")
    serve(retriever_, host, port)


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


from harness.leaderboard.cli import compare_cmd, leaderboard  # at the end: it uses _errors and console from here

main.add_command(leaderboard)
main.add_command(compare_cmd)

if __name__ == "__main__":
    main()
