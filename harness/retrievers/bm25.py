"""BM25 over a corpus with bm25s; the index is built once per (corpus, parameters) and cached."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import bm25s
import numpy as np
import Stemmer

from harness.corpus import Corpus
from harness.errors import CfbenchError
from harness.jsonl import sha256
from harness.paths import cache_dir
from harness.retrievers import Hit

# Pyserini's BM25 defaults, which Search-R1's BM25 server uses.
K1, B = 0.9, 0.4
STOPWORDS = "en"
STEMMER = "english"


class BM25Retriever:
    def __init__(self, corpus: Corpus, k1: float = K1, b: float = B) -> None:
        self.corpus = corpus
        self.params = {"k1": k1, "b": b, "method": "lucene", "stopwords": STOPWORDS, "stemmer": STEMMER}
        self.index_hash = sha256(json.dumps([corpus.sha256, self.params, bm25s.__version__], sort_keys=True).encode())
        self._stemmer = Stemmer.Stemmer(STEMMER)
        self._bm25 = self._load_or_build(cache_dir("indexes", f"bm25s-{self.index_hash[:20]}"))

    def _tokenize(self, texts: list[str]):
        return bm25s.tokenize(texts, stopwords=STOPWORDS, stemmer=self._stemmer, show_progress=False)

    def _load_or_build(self, path) -> bm25s.BM25:
        if (path / "params.index.json").is_file():
            return bm25s.BM25.load(str(path), show_progress=False)
        bm25 = bm25s.BM25(k1=self.params["k1"], b=self.params["b"], method="lucene")
        bm25.index(self._tokenize(list(self.corpus.contents)), show_progress=False)
        tmp = tempfile.mkdtemp(dir=path.parent, prefix=".building-")
        bm25.save(tmp, show_progress=False)
        shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)
        return bm25

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        if k <= 0:
            raise CfbenchError(f"top-k must be positive, got {k}")
        tokens = bm25s.tokenize(queries, stopwords=STOPWORDS, stemmer=self._stemmer, show_progress=False, return_ids=False)
        return [self._top(self._scores(q), k) for q in tokens]

    def _scores(self, tokens: list[str]) -> np.ndarray:
        known = [t for t in tokens if t in self._bm25.vocab_dict]
        if not known:  # nothing to match (empty query, or only unseen words): every passage scores 0
            return np.zeros(len(self.corpus.ids), dtype=np.float32)
        return self._bm25.get_scores(known)

    def _top(self, scores: np.ndarray, k: int) -> list[Hit]:
        k = min(k, len(scores))
        # Every passage scoring at least the k-th best, ordered by (-score, corpus position): exact ties
        # are broken the same way on every run and machine.
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        candidates = np.flatnonzero(scores >= kth)
        order = candidates[np.lexsort((candidates, -scores[candidates]))][:k]
        return [Hit(self.corpus.ids[i], self.corpus.contents[i], float(scores[i])) for i in order]

    def describe(self) -> dict:
        return {
            "kind": "bm25",
            "engine": f"bm25s {bm25s.__version__}",
            "params": self.params,
            "corpus": str(self.corpus.path),
            "corpus_sha256": self.corpus.sha256,
            "index_sha256": self.index_hash,
        }
