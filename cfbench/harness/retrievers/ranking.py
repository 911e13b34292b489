"""Exact, repeatable top-k: best score first, exact ties to the earlier corpus position."""

from __future__ import annotations

import numpy as np

# Extra candidates an approximate or external engine is asked for, so that exact ties at the k-th
# score can still be broken by corpus order.
TIE_MARGIN = 8


def top_k(scores: np.ndarray, indices: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k best (corpus index, score) pairs ordered by (-score, index)."""
    k = min(k, len(scores))
    if k <= 0:
        return []
    if len(scores) > k:  # everything scoring at least the k-th best survives, ties included
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = scores >= kth
        scores, indices = scores[keep], indices[keep]
    order = np.lexsort((indices, -scores))[:k]
    return [(int(indices[i]), float(scores[i])) for i in order]
