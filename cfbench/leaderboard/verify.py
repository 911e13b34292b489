"""`cfbench leaderboard verify ENTRY --sample N`: an entry's trajectories generated again, where its checkpoint is at hand.

Rescoring (store.py) proves that an entry's scores follow from its stored generated text; it cannot prove that the
model generated that text. Verify does, for a sample: N questions drawn with a seeded generator are run again through
the agent loop with the recorded settings (checkpoint, by its weights' hash; engine, dtype, device and threads; the
protocol's knobs; the retriever, by its index hash; the seed and batch size), and each new trajectory row is compared
byte for byte with the stored one. Only in-process hf entries are re-run: a served model (openai) or vLLM's GPU
kernels are not something this machine can stand in for.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cfbench.harness.errors import CfbenchError
from cfbench.harness.jsonl import dumps, read_bytes, sha256
from cfbench.harness.paths import from_portable
from cfbench.harness.protocol import Knobs
from cfbench.harness.runrecord import settings_difference
from cfbench.leaderboard.store import load_run

# What the re-run's own model description may differ in without being other settings: where the weights were found
# (their hash is compared) and the library versions (reported; if they change the numbers, the comparison shows it).
_NOT_SETTINGS = ("model", "model_location", "transformers", "torch", "hub_revision")


@dataclass(frozen=True)
class Verdict:
    entry: Path
    sampled: list[str]  # question ids, in suite order
    differing: list[str]  # "id: where the rows first differ"
    notes: list[str]  # recorded vs present library versions

    @property
    def identical(self) -> int:
        return len(self.sampled) - len(self.differing)


def verify(
    entry: Path, sample: int, *, seed: int = 0, ckpt: str | None = None, on_questions: Callable[[int], None] = lambda n: None
) -> Verdict:
    """Generate `sample` of the entry's questions again and compare each trajectory row with the stored one."""
    from cfbench.harness.agent import run_batch
    from cfbench.harness.backends.hf import HFBackend
    from cfbench.harness.checkpoints import resolve
    from cfbench.harness.evaluate import engine_record, trajectory_row
    from cfbench.harness.retrievers.choose import retriever_for
    from cfbench.harness.suite import load_suite

    run = load_run(entry)  # rescored first: a stored entry that does not prove its scores is refused before any model loads
    if run.trajectories is None:
        raise CfbenchError(f"{entry}: a scores-only entry keeps no trajectories to compare; add its run directory again")
    results = run.results
    recorded = results["model"]
    if recorded.get("engine") != "hf":
        raise CfbenchError(f"{entry}: made with engine {recorded.get('engine')!r}; verify re-runs hf entries (in process) only")
    n = len(run.trajectories)
    if not 1 <= sample <= n:
        raise CfbenchError(f"--sample {sample}: the entry has {n} questions; sample between 1 and {n}")

    suite_path = from_portable(str(results["suite"].get("path", "")))
    if not suite_path.is_file() or sha256(read_bytes(suite_path)) != results["suite"].get("sha256"):
        raise CfbenchError(f"{entry}: its suite file {suite_path} is missing or not the one the run used (sha256 differs)")
    questions = {q.id: q for q in load_suite(str(suite_path)).questions}
    stored = {row["id"]: row for row in run.trajectories}
    drawn = set(random.Random(seed).sample(sorted(stored), sample))
    order = [qid for qid in questions if qid in drawn]  # suite order, as the run met them

    name = ckpt or recorded.get("model")
    if not name:
        raise CfbenchError(f"{entry}: the record names no checkpoint; pass --ckpt PATH")
    resolved = resolve(name)
    if resolved.weights_sha256 != recorded.get("weights_sha256"):
        raise CfbenchError(
            f"checkpoint {name!r} has weights sha256 {str(resolved.weights_sha256)[:16]}, but {entry} was made with "
            f"{str(recorded.get('weights_sha256'))[:16]}; pass the run's checkpoint with --ckpt"
        )
    retriever = _retriever(entry, results["retriever"], retriever_for)
    backend = HFBackend.load(
        resolved,
        device=recorded.get("device", "cpu"),
        dtype=recorded.get("dtype", "float32"),
        threads=recorded.get("threads"),
        linear=recorded.get("linear", "torch"),
    )
    now = engine_record(backend, results.get("batching", "lockstep"))
    difference = settings_difference(_settings(recorded), _settings(now))
    if difference:
        raise CfbenchError(f"{entry}: this machine cannot re-run it with the recorded settings (model.{difference})")
    notes = [f"{k} {recorded.get(k)} recorded, {now.get(k)} now" for k in ("torch", "transformers") if recorded.get(k) != now.get(k)]

    import torch

    torch.manual_seed(results.get("seed", 0))
    knobs = Knobs(**results["protocol"]["knobs"])
    batch_size = int(results.get("batch_size", 16))
    differing = []
    for start in range(0, len(order), batch_size):
        batch = [questions[qid] for qid in order[start : start + batch_size]]
        for traj in run_batch(batch, backend, retriever, knobs):
            again, before = trajectory_row(traj), stored[traj.question.id]
            if dumps(again) != dumps(before):
                differing.append(f"{traj.question.id}: {first_difference(before, again)}")
        on_questions(len(batch))
    return Verdict(entry, order, differing, notes)


def _retriever(entry: Path, recorded: dict, retriever_for):
    """The recorded local index over the recorded corpus; refused unless it describes itself exactly as recorded."""
    kind = recorded.get("kind")
    if kind not in ("bm25", "dense", "lucene"):
        raise CfbenchError(f"{entry}: retrieved with {kind!r}; verify rebuilds local indexes (bm25, dense, lucene) only")
    corpus = from_portable(str(recorded.get("corpus", "")))
    if not corpus.is_file():
        raise CfbenchError(f"{entry}: its corpus {corpus} is not here; verify needs the corpus the run retrieved from")
    retriever = retriever_for(kind, corpus)
    difference = settings_difference({"retriever": recorded}, {"retriever": retriever.describe()})
    if difference:
        raise CfbenchError(f"{entry}: the index here is not the run's ({difference})")
    return retriever


def _settings(model: dict) -> dict:
    return {"model": {k: v for k, v in model.items() if k not in _NOT_SETTINGS}}


def first_difference(before: dict, again: dict) -> str:
    """Where two trajectory rows first differ, as `turn T FIELD` or `FIELD`."""
    turns_a, turns_b = before.get("turns") or [], again.get("turns") or []
    for t, (a, b) in enumerate(zip(turns_a, turns_b), start=1):
        for key in sorted(set(a) | set(b)):
            if dumps(a.get(key)) != dumps(b.get(key)):
                return f"turn {t} {key}"
    if len(turns_a) != len(turns_b):
        return f"{len(turns_a)} turns stored, {len(turns_b)} now"
    key = next(k for k in sorted(set(before) | set(again)) if dumps(before.get(k)) != dumps(again.get(k)))
    return key
