"""Bootstrap intervals and paired significance on question-level scores."""

from __future__ import annotations

import numpy as np

from cfbench.harness import stats
from cfbench.harness.metrics import BENCHMARKS, METRICS
from leaderboard_runs import question_ids


def rows(accuracy: float, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        {"id": qid, "benchmark": bench, "scores": dict.fromkeys(METRICS, float(rng.random() < accuracy))}
        for bench, qid in question_ids(100)
    ]


def test_bootstrap_intervals_and_paired_significance():
    half = rows(0.5, 1)
    spread = stats.intervals(half)
    assert spread == stats.intervals(half)  # fixed seed
    for bench in BENCHMARKS:  # a mean near .5 over 100 questions: the interval is about +-10 points
        width = spread[bench]["cover_em"]["hi"] - spread[bench]["cover_em"]["lo"]
        assert 0.15 < width < 0.25, (bench, width)
    avg = spread["avg7"]["cover_em"]
    assert 0.05 < avg["hi"] - avg["lo"] < 0.1  # seven strata: narrower than any one benchmark

    same = stats.paired(half, half)
    assert all(same[name]["cover_em"]["delta"] == 0 and same[name]["cover_em"]["p"] == 1 for name in same)
    better = stats.paired(rows(0.8, 2), half)
    assert better["avg7"]["cover_em"]["delta"] > 0.2 and better["avg7"]["cover_em"]["p"] < 0.001
    assert better["avg7"]["cover_em"]["lo"] > 0
    noise = stats.paired(rows(0.5, 3), half)
    assert noise["avg7"]["cover_em"]["p"] > 0.05 and noise["avg7"]["cover_em"]["lo"] < 0 < noise["avg7"]["cover_em"]["hi"]
    # Pairing is by question id, whatever the order of the rows.
    assert stats.paired(list(reversed(half)), half)["nq"]["cover_em"]["delta"] == 0
