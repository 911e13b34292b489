"""The answer matcher self-evolution uses for agreement: exact match under the metric's normalisation."""

from __future__ import annotations

from cfbench.harness.metrics import normalize

MATCHER = "em (normalised exact match)"


def matches(prediction: str, label: str) -> bool:
    """Both non-empty and equal after normalisation (lowercase, no punctuation or articles)."""
    p = normalize(prediction)
    return bool(p) and p == normalize(label)
