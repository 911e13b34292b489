"""Self-evolution tasks: source passages drawn from a corpus with a seed, a hop count each, and a fold.

The run's source pool is the corpus shuffled with the seed (its first `source_pool` passages, or all
of them for 0); step s takes the next `per_step` passages of the pool, cycling, so sources recur
across rounds. Each task draws its hop count n in {1,2,3,4} with weights 4:3:2:1 from a generator
seeded by (seed, step, slot), so a resumed run draws the same tasks.

A source's fold is the low bit of the SHA-256 of its id: stable across rounds, restarts and
machines. The run stores the folds of its whole pool in folds.json when it starts and reads them back
on resume, so the split is decided once.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

from cfbench.harness.corpus import Corpus
from cfbench.harness.errors import CfbenchError
from cfbench.harness.runrecord import dumps, write_atomic

HOPS = (1, 2, 3, 4)
FOLDS_FILE = "folds.json"
FOLD_RULE = "sha256(source id) mod 2"


@dataclass(frozen=True)
class Task:
    id: str  # step and slot: unique within a run
    source_id: str
    contents: str  # `"Title"\ntext`
    hops: int


def fold_of(key: str) -> int:
    return hashlib.sha256(key.encode("utf-8")).digest()[-1] & 1


def source_pool(corpus: Corpus, size: int, seed: int) -> list[int]:
    order = list(range(len(corpus.ids)))
    random.Random(seed).shuffle(order)
    return order[:size] if size else order


def tasks_for_step(corpus: Corpus, pool: list[int], step: int, per_step: int, seed: int, hop_weights: list[int]) -> list[Task]:
    """The tasks of 1-based step `step`."""
    tasks = []
    for slot in range(per_step):
        index = pool[((step - 1) * per_step + slot) % len(pool)]
        hops = random.Random(f"{seed}:{step}:{slot}").choices(HOPS, weights=hop_weights)[0]
        tasks.append(Task(f"s{step}-t{slot}", corpus.ids[index], corpus.contents[index], hops))
    return tasks


def pool_folds(corpus: Corpus, pool: list[int], out: Path, resume: bool) -> dict[str, int]:
    """Write the pool's folds once (a new run) or read them back (a resumed one)."""
    path = out / FOLDS_FILE
    if resume and path.is_file():
        stored = json.loads(path.read_text())
        if stored.get("corpus_sha256") != corpus.sha256:
            raise CfbenchError(f"--resume: {path} was made for corpus {stored.get('corpus_sha256')}, not {corpus.sha256}; resume with the run's own corpus")
        return {k: int(v) for k, v in stored["folds"].items()}
    folds = {corpus.ids[i]: fold_of(corpus.ids[i]) for i in pool}
    write_atomic(path, dumps({"rule": FOLD_RULE, "corpus_sha256": corpus.sha256, "folds": folds}) + "\n")
    return folds
