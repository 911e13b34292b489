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


def test_the_p_value_is_the_stated_centred_paired_bootstrap():
    """An independent implementation of docs/protocol.md §3.5's words gives stats.paired's p and interval exactly."""
    import zlib

    a, b = rows(0.5, 5), rows(0.4, 6)
    got = stats.paired(a, b)["2wikimultihopqa"]["cover_em"]
    da = np.array([r["scores"]["cover_em"] for r in a if r["benchmark"] == "2wikimultihopqa"])
    db = np.array([r["scores"]["cover_em"] for r in b if r["benchmark"] == "2wikimultihopqa"])
    n = len(da)
    idx = np.random.default_rng([1325, zlib.crc32(b"2wikimultihopqa"), n]).integers(0, n, size=(2000, n))
    d, resampled = (da - db).mean(), (da - db)[idx].mean(axis=1)
    assert got["delta"] == round(d, 4)
    assert got["p"] == round((1 + np.sum(np.abs(resampled - d) >= abs(d))) / 2001, 4)
    assert (got["lo"], got["hi"]) == (round(np.percentile(resampled, 2.5), 4), round(np.percentile(resampled, 97.5), 4))


def test_the_bootstrap_p_converges_to_its_brute_force_value():
    """Four questions: all 4^4 equally likely resamples enumerated give the exact bootstrap p; the 2,000 drawn ones
    must agree within 4 standard errors of a proportion estimated from 2,000 draws."""
    from itertools import product

    diffs = np.array([1.0, 1.0, 0.0, -1.0])  # A - B per question: A right on two, B right on one
    d = diffs.mean()
    exact = np.mean([abs(diffs[list(i)].mean() - d) >= abs(d) - 1e-12 for i in product(range(4), repeat=4)])
    # By hand: |mean* - 0.25| < 0.25 only when the resample sums to 1: one 1 and three 0s (4 orders, weight 1/2 * 1/4^3)
    # or two 1s, one 0 and one -1 (12 orders, weight 1/4 * 1/4 * 1/4), 8 + 48 = 56 of 256 (as 1/4^4 units); p = 200/256.
    assert exact == 200 / 256
    a = [{"id": f"q{i}", "benchmark": "nq", "scores": dict.fromkeys(METRICS, float(x > 0))} for i, x in enumerate(diffs)]
    b = [{"id": f"q{i}", "benchmark": "nq", "scores": dict.fromkeys(METRICS, float(x < 0))} for i, x in enumerate(diffs)]
    p = stats.paired(a, b)["nq"]["cover_em"]["p"]
    se = np.sqrt(exact * (1 - exact) / stats.RESAMPLES)
    assert abs(p - exact) < 4 * se, (p, exact)


def test_holm_matches_its_definition():
    # Sorted 0.01, 0.02, 0.04 times 3, 2, 1: 0.03, 0.04, 0.04 (kept monotone), returned in the order given.
    assert stats.holm([0.04, 0.01, 0.02]) == [0.04, 0.03, 0.04]
    assert stats.holm([0.5, 0.6]) == [1.0, 1.0] and stats.holm([]) == []
