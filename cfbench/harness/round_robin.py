"""Searches that take turns: one worker thread runs every request a chunk of queries at a time, round robin.

Retrievers are not assumed thread-safe, so searches run one at a time; run whole, a request for
thousands of queries would hold every small request behind it for its full length. Split into
chunks served in turn, a small request waits for at most one chunk of each request ahead of it.
Hand-written because neither the standard library's executors nor anyio schedule fairly between
the callers of one shared worker.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field

from cfbench.harness.retrievers import Hit, Retriever

CHUNK_QUERIES = 16  # small enough that a turn is milliseconds for bm25 on a CPU, big enough to batch a dense encoder


@dataclass
class _Job:
    queries: list[str]
    k: int
    future: Future = field(default_factory=Future)
    results: list[list[Hit]] = field(default_factory=list)


class RoundRobinSearcher:
    def __init__(self, retriever: Retriever, chunk: int = CHUNK_QUERIES) -> None:
        self._retriever = retriever
        self._chunk = chunk
        self._jobs: deque[_Job] = deque()
        self._ready = threading.Condition()
        threading.Thread(target=self._work, name="round-robin-search", daemon=True).start()

    def submit(self, queries: list[str], k: int) -> Future:
        """The hits of every query; cancelling the future (a missed deadline) drops the rest of its chunks."""
        job = _Job(queries, k)
        with self._ready:
            self._jobs.append(job)
            self._ready.notify()
        return job.future

    def _work(self) -> None:
        while True:
            with self._ready:
                while not self._jobs:
                    self._ready.wait()
                job = self._jobs.popleft()
            if job.future.cancelled():
                continue
            done = len(job.results)
            try:
                job.results += self._retriever.search(job.queries[done : done + self._chunk], job.k)
            except Exception as err:  # the request fails, the worker goes on serving the others
                _settle(job.future.set_exception, err)
                continue
            if len(job.results) == len(job.queries):
                _settle(job.future.set_result, job.results)
            else:
                with self._ready:
                    self._jobs.append(job)


def _settle(setter, value) -> None:
    try:
        setter(value)
    except InvalidStateError:  # cancelled by its deadline after the last check: nobody is waiting
        pass
