"""Bootstrap intervals and paired significance over question-level scores (docs/protocol.md §3.5).

Resampling is stratified by benchmark: each resample draws every benchmark's questions with
replacement, keeps its size, and recomputes the benchmark means and from them the group averages
(mean of benchmark means, as metrics.aggregate does). The draws depend only on the seed, the
benchmark's name and its question count, so every run on a suite sees the same draws: intervals do
not change when other runs are added, and two runs on the same questions are compared pairwise.

Intervals are percentile intervals of the resampled means. The p of a paired comparison is the
centred bootstrap's two-sided p: with d the observed difference of means and d*_b its value in
resample b, p = (1 + #{b : |d*_b - d| >= |d|}) / (RESAMPLES + 1). Ties count (scores are 0/1, so
|d*_b - d| = |d| happens in a few percent of resamples): the test is conservative, never liberal.

It lives with evaluation so that the table `cfbench eval` prints (harness/report.py) and the leaderboard show the same
intervals from one implementation; the leaderboard imports it from here.
"""

from __future__ import annotations

import zlib
from functools import lru_cache

import numpy as np

from cfbench.harness.metrics import BENCHMARKS, GROUPS, METRICS

SEED = 1325
RESAMPLES = 2000
LEVEL = 0.95
ALPHA = 0.05  # family-wise error rate of the Holm-corrected pairwise tests (ranks, bold)
DIGITS = 4  # fractions are kept to 0.01 points
_LO, _HI = 50 * (1 - LEVEL), 50 * (1 + LEVEL)  # percentiles bounding the interval


def describe() -> dict:
    return {
        "seed": SEED,
        "resamples": RESAMPLES,
        "level": LEVEL,
        "stratified_by": "benchmark",
        "interval": "percentile",
        "draws": "numpy.random.default_rng([seed, zlib.crc32(benchmark name), questions]).integers(0, questions, (resamples, questions))",
        "p_value": "paired bootstrap, two-sided, centred: (1 + #{b: |d*_b - d| >= |d|}) / (resamples + 1), ties counted",
        "alpha": ALPHA,
        "multiple_comparisons": "Holm over the pairs compared",
    }


def by_benchmark(rows: list[dict], only: set[str] | None = None) -> dict[str, dict[str, np.ndarray]]:
    """Per benchmark, question id -> row index and the (questions x metrics) score matrix, in row order."""
    grouped: dict[str, list[dict]] = {}
    for row in rows:
        if only is None or row["id"] in only:
            grouped.setdefault(row["benchmark"], []).append(row)
    order = [b for b in BENCHMARKS if b in grouped] + sorted(set(grouped) - set(BENCHMARKS))
    return {
        b: {"ids": [r["id"] for r in grouped[b]], "scores": np.array([[r["scores"][m] for m in METRICS] for r in grouped[b]])}
        for b in order
    }


def intervals(rows: list[dict]) -> dict[str, dict[str, dict]]:
    """{benchmark or group: {metric: {"lo", "hi"}}} for one run."""
    draws = _draws({b: part["scores"] for b, part in by_benchmark(rows).items()})
    return {
        name: {m: {"lo": _round(np.percentile(d[:, i], _LO)), "hi": _round(np.percentile(d[:, i], _HI))} for i, m in enumerate(METRICS)}
        for name, d in draws.items()
    }


def centred_p(observed: float, resampled: np.ndarray) -> float:
    """The two-sided p of a centred bootstrap: how often a resampled difference strays from the observed one by its size."""
    return (1 + np.count_nonzero(np.abs(resampled - observed) >= abs(observed) - 1e-12)) / (len(resampled) + 1)


def holm(pvalues: list[float]) -> list[float]:
    """Holm-adjusted p values, in the order given: a hypothesis is rejected at ALPHA when its adjusted p < ALPHA.

    Hand-written (eight lines) because scipy has no Holm step-down and statsmodels is not a dependency.
    """
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * len(pvalues), 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - k) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def paired(rows_a: list[dict], rows_b: list[dict]) -> dict[str, dict[str, dict]]:
    """A minus B on the questions both answered: {name: {metric: {"a", "b", "delta", "lo", "hi", "p", "n"}}}."""
    shared = {r["id"] for r in rows_a} & {r["id"] for r in rows_b}
    parts = by_benchmark(rows_a, shared)
    b_scores = {r["id"]: [r["scores"][m] for m in METRICS] for r in rows_b if r["id"] in shared}
    a = {bench: part["scores"] for bench, part in parts.items()}
    b = {bench: np.array([b_scores[i] for i in part["ids"]]) for bench, part in parts.items()}
    draws_a, draws_b = _draws(a), _draws(b)
    mean_a = _with_groups({bench: s.mean(axis=0) for bench, s in a.items()})
    mean_b = _with_groups({bench: s.mean(axis=0) for bench, s in b.items()})
    out: dict[str, dict[str, dict]] = {}
    for name, da in draws_a.items():
        n = sum(len(a[bench]) for bench in GROUPS.get(name, (name,)))
        out[name] = {}
        for i, m in enumerate(METRICS):
            delta = mean_a[name][i] - mean_b[name][i]
            d = da[:, i] - draws_b[name][:, i]
            p = centred_p(delta, d)
            out[name][m] = {
                "a": _round(mean_a[name][i]),
                "b": _round(mean_b[name][i]),
                "delta": _round(delta),
                "lo": _round(np.percentile(d, _LO)),
                "hi": _round(np.percentile(d, _HI)),
                "p": _round(p),
                "n": n,
            }
    return out


@lru_cache(maxsize=64)
def _indices(benchmark: str, n: int) -> np.ndarray:
    rng = np.random.default_rng([SEED, zlib.crc32(benchmark.encode()), n])
    return rng.integers(0, n, size=(RESAMPLES, n))


def _draws(scores: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """(resamples x metrics) bootstrap means per benchmark and group."""
    return _with_groups({bench: s[_indices(bench, len(s))].mean(axis=1) for bench, s in scores.items()})


def _with_groups(per_benchmark: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Adds each group whose members are all present: the mean of its benchmarks' values."""
    for group, members in GROUPS.items():
        if all(b in per_benchmark for b in members):
            per_benchmark[group] = np.mean([per_benchmark[b] for b in members], axis=0)
    return per_benchmark


def _round(x) -> float:
    return round(float(x), DIGITS)
