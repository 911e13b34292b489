"""Outcome rewards for a finished trajectory.

`em`: exact match of the final answer (the last `<answer>` in the model's own text) with any gold
answer, under the metric's normalisation: Search-R1's outcome reward.

`em+format` (only the cpu-smoke scale: a model that never writes tags gets no signal from em
alone): Search-R1 v0.3's format-shaped reward with its retrieval bonus off. A trajectory is well
formed when every generation ended in a `<search>` or `<answer>` action (no invalid turn):
    correct and well formed -> 1; correct, not well formed -> 1 - structure;
    wrong or no answer, well formed -> structure; wrong answer, not well formed -> final_format;
    no answer, not well formed -> 0.
"""

from __future__ import annotations

from cfbench.harness import metrics

KINDS = ("em", "em+format")


def well_formed(turns: list[dict]) -> bool:
    return bool(turns) and all(t["action"] != "invalid" for t in turns)


def reward(kind: str, prediction: str, golden: list[str], turns: list[dict], structure: float = 0.2, final_format: float = 0.1) -> float:
    correct = bool(prediction) and metrics.score(prediction, golden)["em"] == 1.0
    if kind == "em":
        return 1.0 if correct else 0.0
    formed = well_formed(turns)
    if correct:
        return 1.0 if formed else 1.0 - structure
    if formed:
        return structure
    return final_format if prediction else 0.0
