"""Retrievers: a batch of queries in, the top-k passages (id, contents, score) of each out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from cfbench.harness.paths import portable

if TYPE_CHECKING:
    from cfbench.harness.corpus import Corpus


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


def local_index(kind: str, corpus: Corpus, index_hash: str, **params) -> dict:
    """A local index's describe(): its kind and parameters, then the corpus and the locally computed index hash."""
    return {"kind": kind, **params, "corpus": portable(corpus.path), "corpus_sha256": corpus.sha256, "index_sha256": index_hash}
