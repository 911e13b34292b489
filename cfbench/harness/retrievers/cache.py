"""A result cache keyed by (source, query, k): reruns over the same index skip retrieval.

The source is ("index", hash) for a local index, its hash computed here from the corpus and the
parameters, and ("server", url, reported hash) for a retrieval server: a server's /health is its
own claim, so its answers are kept apart per server and never stand in for a local index's.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3

from cfbench.harness.paths import cache_dir
from cfbench.harness.retrievers import Hit, Retriever


class CachedRetriever:
    def __init__(self, inner: Retriever, source: tuple[str, ...]) -> None:
        self.inner = inner
        self.source = source
        self.hits = self.misses = 0
        self._db = sqlite3.connect(cache_dir("retrieval") / "results.sqlite", isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, hits TEXT NOT NULL)")

    def _key(self, query: str, k: int) -> str:
        return hashlib.sha256(json.dumps([*self.source, query, k]).encode()).hexdigest()

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        keys = [self._key(q, k) for q in queries]
        stored = (
            dict(self._db.execute(f"SELECT key, hits FROM results WHERE key IN ({','.join('?' * len(keys))})", keys).fetchall())
            if keys
            else {}
        )
        todo = list(dict.fromkeys(q for q, key in zip(queries, keys) if key not in stored))  # distinct misses, in order
        if todo:
            fresh = self.inner.search(todo, k)
            rows = [(self._key(q, k), json.dumps([[h.id, h.contents, h.score] for h in hits])) for q, hits in zip(todo, fresh)]
            self._db.executemany("INSERT OR REPLACE INTO results VALUES (?, ?)", rows)
            stored.update(rows)
        self.misses += len(todo)
        self.hits += len(queries) - len(todo)
        return [[Hit(*h) for h in json.loads(stored[key])] for key in keys]

    def describe(self) -> dict:
        return self.inner.describe()
