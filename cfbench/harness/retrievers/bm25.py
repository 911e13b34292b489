"""BM25 over a corpus with bm25s (Pyserini's default k1=0.9, b=0.4, as Search-R1's BM25 server)."""

from __future__ import annotations

from pathlib import Path

import bm25s
import numpy as np
import Stemmer

from cfbench.harness.corpus import Corpus
from cfbench.harness.errors import CfbenchError
from cfbench.harness.retrievers import Hit, local_index
from cfbench.harness.retrievers.ranking import top_k

PARAMS = {"k1": 0.9, "b": 0.4, "method": "lucene", "stopwords": "en", "stemmer": "english", "engine": f"bm25s {bm25s.__version__}"}


def stemmer():
    return Stemmer.Stemmer(PARAMS["stemmer"])


def build_bm25(corpus: Corpus, directory: Path) -> None:
    bm25 = bm25s.BM25(k1=PARAMS["k1"], b=PARAMS["b"], method=PARAMS["method"])
    tokens = bm25s.tokenize(list(corpus.contents), stopwords=PARAMS["stopwords"], stemmer=stemmer(), show_progress=False)
    if not tokens.vocab:
        raise CfbenchError(f"{corpus.path}: no indexable words in any passage (words need two or more letters)")
    bm25.index(tokens, show_progress=False)
    bm25.save(str(directory), show_progress=False)


class BM25Retriever:
    def __init__(self, corpus: Corpus, directory: Path, index_hash: str) -> None:
        self.corpus = corpus
        self.index_hash = index_hash
        self._stemmer = stemmer()
        self._bm25 = bm25s.BM25.load(str(directory), show_progress=False)
        self._positions = np.arange(len(corpus.ids))

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        if k <= 0:
            raise CfbenchError(f"top-k must be positive, got {k}")
        tokens = bm25s.tokenize(queries, stopwords=PARAMS["stopwords"], stemmer=self._stemmer, show_progress=False, return_ids=False)
        results = []
        for query_tokens in tokens:
            best = top_k(self._scores(query_tokens), self._positions, k)
            results.append([Hit(self.corpus.ids[i], self.corpus.contents[i], s) for i, s in best])
        return results

    def _scores(self, tokens: list[str]) -> np.ndarray:
        known = [t for t in tokens if t in self._bm25.vocab_dict]
        if not known:  # nothing to match (empty query, or only unseen words): every passage scores 0
            return np.zeros(len(self.corpus.ids), dtype=np.float32)
        return self._bm25.get_scores(known)

    def describe(self) -> dict:
        return local_index("bm25", self.corpus, self.index_hash, params=PARAMS)
