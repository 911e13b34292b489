"""Retrievers: a batch of queries in, the top-k passages (id, contents, score) of each out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Hit:
    id: str
    contents: str
    score: float


class Retriever(Protocol):
    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        """One list of at most k hits per query, best first, ties broken by corpus order."""
        ...

    def describe(self) -> dict:
        """Everything that decides the results (kind, parameters, corpus and index hashes)."""
        ...
