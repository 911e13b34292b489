"""Answer metrics of protocol v1 (docs/protocol.md §3), versioned with the protocol.

normalize(s): lowercase; delete ASCII punctuation; replace the whole words a/an/the with a space;
collapse whitespace. Each metric takes the max over every gold alias.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from statistics import mean

METRIC_VERSION = "cfbench-metrics-v1"
METRICS = ("cover_em", "em", "sub_em", "f1")

BENCHMARKS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
SINGLE_HOP = ("nq", "triviaqa", "popqa")
MULTI_HOP = ("hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
GROUPS = {"avg7": BENCHMARKS, "multi_hop": MULTI_HOP, "single_hop": SINGLE_HOP}

_PUNCT = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_YES_NO = {"yes", "no", "noanswer"}


def normalize(text: str) -> str:
    text = text.lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _covers(pred_tokens: list[str], gold_tokens: list[str]) -> bool:
    n = len(gold_tokens)
    return n > 0 and any(pred_tokens[i : i + n] == gold_tokens for i in range(len(pred_tokens) - n + 1))


def _f1(pred: str, gold: str) -> float:
    if (pred in _YES_NO or gold in _YES_NO) and pred != gold:
        return 0.0
    common = Counter(pred.split()) & Counter(gold.split())
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred.split())
    recall = same / len(gold.split())
    return 2 * precision * recall / (precision + recall)


def score(prediction: str, golden_answers: list[str]) -> dict[str, float]:
    """All four metrics for one prediction; an empty (normalised) prediction scores 0."""
    pred = normalize(prediction)
    result = dict.fromkeys(METRICS, 0.0)
    if not pred:
        return result
    pred_tokens = pred.split()
    for alias in golden_answers:
        gold = normalize(alias)
        if not gold:
            continue
        result["em"] = max(result["em"], float(pred == gold))
        result["cover_em"] = max(result["cover_em"], float(_covers(pred_tokens, gold.split())))
        result["sub_em"] = max(result["sub_em"], float(gold in pred))
        result["f1"] = max(result["f1"], _f1(pred, gold))
    return result


def aggregate(rows: list[dict]) -> dict[str, dict]:
    """Per-benchmark means plus the group averages (means of benchmark means, never of rows).

    A group appears only when every one of its benchmarks is present.
    """
    by_bench: dict[str, list[dict]] = {}
    for row in rows:
        by_bench.setdefault(row["benchmark"], []).append(row["scores"])
    order = [b for b in BENCHMARKS if b in by_bench] + sorted(set(by_bench) - set(BENCHMARKS))
    table: dict[str, dict] = {}
    for bench in order:
        scores = by_bench[bench]
        table[bench] = {m: mean(s[m] for s in scores) for m in METRICS} | {"n": len(scores)}
    for group, members in GROUPS.items():
        if all(b in table for b in members):
            table[group] = {m: mean(table[b][m] for b in members) for m in METRICS} | {"n": sum(table[b]["n"] for b in members)}
    return table
