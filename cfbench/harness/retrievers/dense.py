"""Dense retrieval: normalised passage embeddings, inner-product search with faiss (flat or HNSW)."""

from __future__ import annotations

import numpy as np

from cfbench.harness.corpus import Corpus
from cfbench.harness.errors import CfbenchError
from cfbench.harness.retrievers import Hit, local_index
from cfbench.harness.retrievers.encoders import Encoder
from cfbench.harness.retrievers.ranking import TIE_MARGIN, top_k


class DenseRetriever:
    def __init__(self, corpus: Corpus, embeddings: np.ndarray, encoder: Encoder, index_hash: str, hnsw_m: int = 0) -> None:
        import faiss

        if embeddings.shape != (len(corpus.ids), encoder.dim):
            raise CfbenchError(f"embeddings have shape {embeddings.shape}, expected ({len(corpus.ids)}, {encoder.dim}); rebuild the index")
        self.corpus = corpus
        self.encoder = encoder
        self.index_hash = index_hash
        vectors = np.ascontiguousarray(embeddings, dtype=np.float32)
        if hnsw_m:
            self.index = faiss.IndexHNSWFlat(encoder.dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
        else:
            self.index = faiss.IndexFlatIP(encoder.dim)
        self.index.add(vectors)
        self.hnsw_m = hnsw_m

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        if k <= 0:
            raise CfbenchError(f"top-k must be positive, got {k}")
        vectors = self.encoder.encode(queries, query=True)
        fetch = min(k + TIE_MARGIN, len(self.corpus.ids))
        scores, indices = self.index.search(vectors, fetch)
        results = []
        for row_scores, row_indices in zip(scores, indices):
            valid = row_indices >= 0
            order = top_k(row_scores[valid], row_indices[valid], k)
            results.append([Hit(self.corpus.ids[i], self.corpus.contents[i], float(s)) for i, s in order])
        return results

    def describe(self) -> dict:
        return local_index(
            "dense",
            self.corpus,
            self.index_hash,
            engine="faiss " + ("HNSW" if self.hnsw_m else "flat inner product"),
            encoder=self.encoder.describe(),
            hnsw_m=self.hnsw_m,
        )
