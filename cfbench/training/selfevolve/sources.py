"""Self-evolution tasks: source passages drawn from a corpus with a seed, a hop count each, and a fold.

The run's source pool is the corpus shuffled with the seed (its first `source_pool` passages, or all
of them for 0); step s takes the next `per_step` passages of the pool, cycling. A pool much smaller
than a round's tasks makes every source recur within a round (the configs size it for 3-4
proposals per source per round), so a solver that has trained on a source scores new questions from
it from round 1 on: the same-source feedback the study's controls are about. Each task draws its hop
count n in {1,2,3,4} with weights 4:3:2:1 from a generator seeded by (seed, step, slot), so a
resumed run draws the same tasks.

Folds are per group of connected sources: sources with the same title, or near-duplicate texts
(Jaccard of their word 5-shingle sets >= NEAR_DUPLICATE), joined transitively, so one passage
copied under two ids cannot feed both CrossFit folds. A group's fold is the low bit of the SHA-256
of its smallest id: stable across rounds, restarts and machines (a group of one is its own id).
The run stores its pool, the groups, the folds and how often each source is proposed per round in
folds.json when it starts and reads the folds back on resume, so the split is decided once.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING

from cfbench.harness import jsonl
from cfbench.harness.corpus import Corpus
from cfbench.harness.errors import CfbenchError
from cfbench.harness.metrics import normalize
from cfbench.harness.paths import BUNDLED_CORPUS, MANIFEST, TRAIN_SOURCES
from cfbench.harness.runrecord import dumps, write_atomic

if TYPE_CHECKING:
    from cfbench.training.config.classes import SelfEvolutionConfig

HOPS = (1, 2, 3, 4)
FOLDS_FILE = "folds.json"
FOLD_RULE = "sha256(smallest source id of the connected group) mod 2"
SHINGLE_WORDS = 5
NEAR_DUPLICATE = 0.5  # shingle Jaccard; measured on the bundled corpus: its ~80 re-crawled same-title pairs score 0.58-1.0
COMMON_SHINGLE = 50  # a shingle in more sources than this proposes no candidate pair (boilerplate); pairs are still scored on all

CORPORA = {"train-sources": TRAIN_SOURCES, "bundled": BUNDLED_CORPUS}


def corpus_path(config: SelfEvolutionConfig) -> Path:
    """The source corpus a config names: `train-sources` (the default), `bundled`, or a file."""
    return CORPORA.get(config.corpus) or Path(config.corpus)


def refuse_eval_corpus(config: SelfEvolutionConfig) -> None:
    """Sources from the evaluation corpus (the bundled one, under any name) would train the solver on
    questions about the test evidence (docs/protocol.md §5): refused unless the run asks for it."""
    path = corpus_path(config)
    if config.allow_eval_corpus or path == TRAIN_SOURCES:  # the default is built disjoint (and tested so)
        return
    evaluation = json.loads(MANIFEST.read_text())["corpus"]["bundled"]["sha256"]
    if path.is_file() and jsonl.sha256(jsonl.read_bytes(path)) == evaluation:
        raise CfbenchError(
            f"self-evolution sources {config.corpus!r} are the evaluation corpus: the solver would train on questions "
            "about the test evidence; use the default train-sources corpus, or pass --allow-eval-corpus to study the leak"
        )


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


def tasks_for_step(corpus: Corpus, pool: list[int], step: int, per_step: int, seed: int, hop_weights: tuple[float, ...]) -> list[Task]:
    """The tasks of 1-based step `step`."""
    tasks = []
    for slot in range(per_step):
        index = pool[((step - 1) * per_step + slot) % len(pool)]
        hops = random.Random(f"{seed}:{step}:{slot}").choices(HOPS, weights=hop_weights)[0]
        tasks.append(Task(f"s{step}-t{slot}", corpus.ids[index], corpus.contents[index], hops))
    return tasks


def shingles(contents: str) -> set[str]:
    words = normalize(contents.partition("\n")[2]).split()
    return {" ".join(words[i : i + SHINGLE_WORDS]) for i in range(max(1, len(words) - SHINGLE_WORDS + 1))}


def connected_groups(corpus: Corpus, pool: list[int]) -> dict[str, str]:
    """Source id -> its group's key (smallest id), over the pool.

    Written here rather than with datasketch's MinHash LSH: that needs scipy, which nothing else here
    does, and is approximate; exact Jaccard over candidate pairs that share an uncommon shingle finds
    every near-duplicate pair (two texts with Jaccard >= 0.5 share many shingles, not only common ones).
    """
    ids = [corpus.ids[i] for i in pool]
    parent = {i: i for i in ids}

    def root(x: str) -> str:
        while parent[x] != x:
            parent[x] = x = parent[parent[x]]
        return x

    def join(a: str, b: str) -> None:
        ra, rb = root(a), root(b)
        parent[max(ra, rb)] = min(ra, rb)

    sets = {corpus.ids[i]: shingles(corpus.contents[i]) for i in pool}
    titles: dict[str, str] = {}
    postings: dict[str, list[str]] = {}
    for i in pool:
        sid, title = corpus.ids[i], normalize(corpus.contents[i].partition("\n")[0])
        if title:
            join(sid, titles.setdefault(title, sid))
        for s in sets[sid]:
            postings.setdefault(s, []).append(sid)
    candidates = {pair for holders in postings.values() if len(holders) <= COMMON_SHINGLE for pair in combinations(holders, 2)}
    for a, b in candidates:
        if root(a) != root(b) and len(sets[a] & sets[b]) >= NEAR_DUPLICATE * len(sets[a] | sets[b]):
            join(a, b)
    return {i: root(i) for i in ids}


def per_round(pool: list[int], tasks_per_round: int) -> dict:
    """How many times the pool's sources are proposed from in round 1 (later rounds shift the cycle, same spread)."""
    counts = Counter(pool[j % len(pool)] for j in range(tasks_per_round))
    seen = [counts.get(i, 0) for i in dict.fromkeys(pool)]
    return {"tasks_per_round": tasks_per_round, "sources": len(seen), "min": min(seen), "max": max(seen)}


def pool_folds(corpus: Corpus, pool: list[int], out: Path, resume: bool, tasks_per_round: int) -> dict[str, int]:
    """Write the pool's groups and folds once (a new run) or read the folds back (a resumed one)."""
    path = out / FOLDS_FILE
    if resume and path.is_file():
        stored = json.loads(path.read_text())
        if stored.get("corpus_sha256") != corpus.sha256:
            raise CfbenchError(
                f"--resume: {path} was made for corpus {stored.get('corpus_sha256')}, not {corpus.sha256}; resume with the run's own corpus"
            )
        return {k: int(v) for k, v in stored["folds"].items()}
    groups = connected_groups(corpus, pool)
    folds = {sid: fold_of(key) for sid, key in groups.items()}
    write_atomic(
        path,
        dumps(
            {
                "rule": FOLD_RULE,
                "corpus_sha256": corpus.sha256,
                "near_duplicate": {"shingle_words": SHINGLE_WORDS, "jaccard_at_least": NEAR_DUPLICATE},
                "pool": [corpus.ids[i] for i in pool],
                "proposals_per_source": per_round(pool, tasks_per_round),
                "groups": {s: k for s, k in groups.items() if k != s},
                "folds": folds,
            }
        )
        + "\n",
    )
    return folds
