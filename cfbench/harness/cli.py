"""The evaluation layer's commands (eval, index, retriever, serve-model); cfbench/cli.py composes them."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from cfbench.harness.checkpoints import ADAPTED, BUNDLED
from cfbench.harness.cli_help import SectionedCommand
from cfbench.harness.cli_output import console, job_progress, one_line_errors
from cfbench.harness.protocol import Knobs
from cfbench.harness.retrievers.index import KINDS

DEFAULTS = Knobs()
BUNDLED_MODELS = ", ".join([*BUNDLED, *ADAPTED])
EVAL_SECTIONS = {
    "Retrieval": ("retriever_spec", "corpus"),
    "Protocol knobs (a run with other values is ranked apart from protocol v1's)": (
        "topk",
        "max_searches",
        "max_new_tokens",
        "max_obs_tokens",
        "max_context_tokens",
    ),
    "hf backend (transformers in process)": ("device", "dtype", "threads", "linear"),
    "vllm backend (GPU)": ("tensor_parallel_size", "gpu_memory_utilization", "max_model_len"),
    "openai backend (an OpenAI-compatible server)": (
        "base_url",
        "model",
        "tokenizer",
        "concurrency",
        "request_size",
        "timeout",
        "retries",
        "api_key",
        "organization",
    ),
}


@click.command("eval", cls=SectionedCommand, sections=EVAL_SECTIONS)
@click.option(
    "--ckpt",
    default=None,
    help=f"Local HF checkpoint dir, a bundled model ({BUNDLED_MODELS}) or a hub id (hf, vllm backends).",
)
@click.option(
    "--suite", default="fixed1325", show_default=True, help="Bundled suite (fixed1325, mini, full) or a FlashRAG-style jsonl file."
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Only the first N questions of each benchmark (recorded in the run; comparable only with runs of the same "
    "limit; never publishable to a leaderboard).",
)
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Run directory (trajectories, results).")
@click.option("--resume", is_flag=True, help="Continue the run in --out without redoing finished questions.")
@click.option(
    "--retriever",
    "retriever_spec",
    default="bm25",
    show_default=True,
    help="bm25, dense or lucene over --corpus, an index directory, a Search-R1-style server URL, or replay:RUN_DIR.",
)
@click.option("--corpus", type=click.Path(path_type=Path), default=None, help="Passages as jsonl(.gz) [default: bundled corpus].")
@click.option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True, help="Trajectories stepped together.")
@click.option(
    "--batching",
    type=click.Choice(["continuous", "lockstep"]),
    default=None,
    help="continuous: a trajectory's row goes to the next one as soon as it ends (hf); lockstep: each batch turn by turn "
    "[default: continuous for hf, lockstep for the others; a resumed run keeps its own].",
)
@click.option("--topk", type=int, default=DEFAULTS.topk, show_default=True, help="Passages returned per search.")
@click.option(
    "--max-searches",
    type=int,
    default=DEFAULTS.max_searches,
    show_default=True,
    help="Search (or malformed) turns before the last turn, which must answer.",
)
@click.option("--max-new-tokens", type=int, default=DEFAULTS.max_new_tokens, show_default=True, help="Tokens generated per turn.")
@click.option(
    "--max-obs-tokens", type=int, default=DEFAULTS.max_obs_tokens, show_default=True, help="Retrieved text is cut to this many tokens."
)
@click.option(
    "--max-context-tokens",
    type=int,
    default=DEFAULTS.max_context_tokens,
    show_default=True,
    help="Generation sees the last this-many tokens of the trajectory.",
)
@click.option(
    "--backend",
    "engine",
    type=click.Choice(["hf", "vllm", "openai"]),
    default="hf",
    show_default=True,
    help="hf: transformers in process; vllm: vLLM in process (GPU); openai: an OpenAI-compatible server.",
)
@click.option("--device", default="cpu", show_default=True, help="hf: torch device.")
@click.option(
    "--dtype",
    type=click.Choice(["float32", "bfloat16", "float16"]),
    default=None,
    help="hf, vllm: weights dtype [default: float32 for hf, bfloat16 for vllm].",
)
@click.option("--threads", type=click.IntRange(min=1), default=None, help="hf: torch CPU threads (default: torch's).")
@click.option(
    "--linear",
    type=click.Choice(["torch", "onednn"]),
    default="torch",
    show_default=True,
    help="hf on CPU: onednn packs each weight once for oneDNN (faster decoding on some CPUs, last-bit float differences; "
    "README Benchmarks).",
)
@click.option("--tensor-parallel-size", type=click.IntRange(min=1), default=1, show_default=True, help="vllm: GPUs per model.")
@click.option(
    "--gpu-memory-utilization",
    type=click.FloatRange(0.05, 1.0),
    default=0.9,
    show_default=True,
    help="vllm: share of GPU memory it may take.",
)
@click.option("--max-model-len", type=click.IntRange(min=1), default=None, help="vllm: context length [default: the model's].")
@click.option("--base-url", default=None, help="openai: the server, e.g. http://127.0.0.1:8001/v1.")
@click.option("--model", default=None, help="openai: the model name the server serves.")
@click.option("--tokenizer", default=None, help="openai: tokenizer dir, bundled model or hub id [default: --model].")
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True, help="openai: requests in flight.")
@click.option("--request-size", type=click.IntRange(min=1), default=16, show_default=True, help="openai: prompts per request.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=600.0, show_default=True, help="openai: seconds per request.")
@click.option("--retries", type=click.IntRange(min=0), default=3, show_default=True, help="openai: retries of a request.")
@click.option("--api-key", default=None, help="openai: the server's key [default: $OPENAI_API_KEY; none for a local server].")
@click.option("--organization", default=None, help="openai: OpenAI organization header [default: $OPENAI_ORG_ID].")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of torch and of sampled generation (greedy ignores it).")
def eval_cmd(
    ckpt,
    suite,
    limit,
    out,
    resume,
    retriever_spec,
    corpus,
    batch_size,
    batching,
    topk,
    max_searches,
    max_new_tokens,
    max_obs_tokens,
    max_context_tokens,
    engine,
    seed,
    **engine_options,
) -> None:
    """Evaluate a checkpoint on a suite under protocol v1 and print Cover-EM tables.

    \b
    Examples:
      cfbench eval --ckpt smollm2-135m-search --suite mini --out runs/mini
      cfbench eval --ckpt smollm2-135m-search --limit 2 --out runs/try      # 2 questions per benchmark
      cfbench eval --ckpt runs/train/checkpoint-100 --out runs/ckpt100 --threads 2
      cfbench eval --backend openai --base-url http://127.0.0.1:8001/v1 --model M --tokenizer M --out runs/served
      cfbench eval --ckpt smollm2-135m-search --out runs/mini --resume     # finish an interrupted run
    """
    from cfbench.harness.backends.choose import backend_for, check_loadable
    from cfbench.harness.evaluate import default_batching, evaluate
    from cfbench.harness.jsonl import iter_rows, read_bytes
    from cfbench.harness.report import results_table
    from cfbench.harness.retrievers.choose import retriever_for
    from cfbench.harness.runrecord import TRAJECTORIES, check_out
    from cfbench.harness.suite import first_per_benchmark, load_suite

    with one_line_errors():
        knobs = Knobs(topk, max_searches, max_new_tokens, max_obs_tokens, max_context_tokens)
        check_out(out, resume)  # before any model loads
        check_loadable(engine, ckpt, engine_options["device"])
        the_suite = load_suite(suite)
        if limit is not None:
            the_suite = first_per_benchmark(the_suite, limit)
        console.print(f"loading index ({retriever_spec}) ...", highlight=False, soft_wrap=True)
        retriever = retriever_for(retriever_spec, corpus)
        console.print(f"loading model ({ckpt or engine_options.get('model') or engine}, {engine}) ...", highlight=False, soft_wrap=True)
        backend = backend_for(engine, ckpt=ckpt, seed=seed, **engine_options)
        with job_progress(the_suite.name, "q", fields={"searches": 0}) as progress:

            def on_searches(n: int) -> None:
                progress.update(searches=progress.fields["searches"] + n)

            results = evaluate(
                the_suite,
                backend,
                retriever,
                knobs,
                out,
                batch_size=batch_size,
                seed=seed,
                resume=resume,
                batching=batching or default_batching(backend, out, resume),
                on_start=progress.start,
                on_questions=lambda n: progress.update(advance=n),
                on_searches=on_searches,
            )
        rows = [row for _, row in iter_rows(out / TRAJECTORIES, read_bytes(out / TRAJECTORIES))]
        Console().print(results_table(results, rows))
        console.print(f"run record: {out}", highlight=False, soft_wrap=True)


@click.group()
def index() -> None:
    """Build retrieval indexes."""


@index.command("build")
@click.option("--corpus", type=click.Path(path_type=Path), required=True, help="Passages as jsonl(.gz): id+contents or id+title+text.")
@click.option("--kind", type=click.Choice(KINDS), required=True, help="Index kind.")
@click.option(
    "--encoder", default="minilm", show_default=True, help="Dense encoder: minilm (offline), e5-base-v2 (hub), or a model dir/id."
)
@click.option(
    "--hnsw-m", type=click.IntRange(min=0), default=0, show_default=True, help="Dense: HNSW graph degree (0 = exact flat search)."
)
@click.option(
    "--dtype", type=click.Choice(["float32", "float16"]), default="float32", show_default=True, help="Dense: stored embedding type."
)
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Index directory to write.")
def index_build(corpus, kind, encoder, hnsw_m, dtype, out) -> None:
    """Build an index directory with a manifest (corpus hash, kind, parameters, build time).

    \b
    Example:
      cfbench index build --corpus passages.jsonl.gz --kind bm25 --out indexes/bm25
    """
    from cfbench.harness.retrievers.index import build_index, read_manifest

    with one_line_errors():
        build_index(corpus, kind, out, encoder=encoder, hnsw_m=hnsw_m, dtype=dtype)
        manifest = read_manifest(out)
        console.print(
            f"built {kind} index of {manifest['corpus']['n']} passages in {manifest['build_seconds']} s: {out}",
            highlight=False,
            soft_wrap=True,
        )


@click.group()
def retriever() -> None:
    """Serve retrieval over HTTP."""


@retriever.command("serve")
@click.option("--index", "index_dir", type=click.Path(path_type=Path), required=True, help="An index directory.")
@click.option("--corpus", type=click.Path(path_type=Path), default=None, help="The corpus [default: the one in the manifest].")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True, help="Port to listen on.")
@click.option("--max-results", type=click.IntRange(min=1), default=8192, show_default=True, help="Most passages a request gets.")
@click.option("--max-body-bytes", type=click.IntRange(min=1), default=1 << 20, show_default=True, help="Largest request body.")
@click.option("--deadline", type=click.FloatRange(min=0.1), default=60.0, show_default=True, help="Seconds a request may take.")
@click.option(
    "--max-connections", type=click.IntRange(min=1), default=64, show_default=True, help="Open connections at once; past it, a 503."
)
def retriever_serve(index_dir, corpus, host, port, max_results, max_body_bytes, deadline, max_connections) -> None:
    """Answer Search-R1's POST /retrieve (and GET /health) from an index."""
    from cfbench.harness.corpus import load_corpus
    from cfbench.harness.retrieval_server import Limits, serve
    from cfbench.harness.retrievers.index import open_index

    with one_line_errors():
        retriever_ = open_index(index_dir, load_corpus(corpus) if corpus else None)
        console.print(f"serving {index_dir} on http://{host}:{port}/retrieve", highlight=False, soft_wrap=True)
    serve(retriever_, host, port, Limits(max_results, max_body_bytes, deadline), max_connections)


@click.command("serve-model")
@click.option("--ckpt", required=True, help=f"Local HF checkpoint dir, a bundled model ({BUNDLED_MODELS}) or a hub id.")
@click.option("--name", default=None, help="The model name clients pass as `model` [default: --ckpt].")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8001, show_default=True, help="Port to listen on.")
@click.option("--device", default="cpu", show_default=True, help="Torch device.")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default="float32", show_default=True, help="Weights dtype.")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Torch CPU threads (default: torch's).")
@click.option("--linear", type=click.Choice(["torch", "onednn"]), default="torch", show_default=True, help="As for eval.")
@click.option(
    "--adapters",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="Folder POST /v1/load_lora_adapter may load LoRA adapters from (a training run's rollout-adapters/, or a folder above it) "
    "[default: none, the route loads nothing].",
)
def serve_model(ckpt, name, host, port, device, dtype, threads, linear, adapters) -> None:
    """Serve a local model as OpenAI-compatible /v1/completions and /v1/chat/completions (greedy, or sampled with a seed)."""
    from cfbench.harness.backends.choose import check_device
    from cfbench.harness.backends.hf import HFBackend
    from cfbench.harness.checkpoints import resolve
    from cfbench.harness.model_server import serve

    with one_line_errors():
        check_device(device)
        console.print(f"loading model ({ckpt}) ...", highlight=False, soft_wrap=True)
        backend = HFBackend.load(resolve(ckpt), device=device, dtype=dtype, threads=threads, linear=linear)
        console.print(f"serving {ckpt} as {name or ckpt!r} on http://{host}:{port}/v1", highlight=False, soft_wrap=True)
    serve(backend, name or ckpt, host, port, adapters)


COMMANDS = (eval_cmd, index, retriever, serve_model)
