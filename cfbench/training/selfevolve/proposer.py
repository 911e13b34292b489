"""The Dr. Zero proposer: its prompt, strict parsing of its proposal, and its reward.

The proposer reads a source passage, searches n-1 times (n = the task's hop count), and ends with
`<question>...</question><answer>...</answer>`. Parsing is strict: the final generation holds
exactly one question and one answer tag pair in that order, both non-empty, the answer is not
contained in the question (after the metric's normalisation), and the proposer made exactly n-1
searches. Reward = format_weight x format + difficulty f(k), where k of the scoring solver's
answers match the adopted label and f(k) = (m-k)/(m-1) for 0 < k < m, else 0 (m = 5: 1, .75, .5,
.25 for k = 1..4).

`graded` format (cpu-smoke only, like Search-R1 v0.3's shaped reward) gives a quarter per tag a
proposal has, in order, so a model that writes no tags yet gets a signal; admission still needs
the strict parse.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cfbench.harness.metrics import normalize
from cfbench.training.selfevolve.sources import Task

_TAGS = ("<question>", "</question>", "<answer>", "</answer>")
_PROPOSAL = re.compile(r"<question>(.*?)</question>\s*<answer>(.*?)</answer>", re.DOTALL)

PROMPT = (
    "You write one question from a source document, for a search agent to answer. {plan} Put the question "
    "inside <question> and </question> and its short answer inside <answer> and </answer>; the answer must not "
    "appear in the question. You can call a search engine by <search> query </search> and it will return the top "
    "searched results between <information> and </information>. For example, <question> Which city hosted the "
    "2008 Summer Olympics? </question> <answer> Beijing </answer>. Source document: {document}\n"
)
_PLANS = {
    1: "Ask about a fact the source document states, answerable from it alone, without searching.",
    2: "Search once for something the source document mentions, then ask a 2-hop question that needs both the source and what you found.",
}


def prompt(task: Task) -> str:
    plan = _PLANS.get(task.hops) or (
        f"Search {task.hops - 1} times, each time following something the source or your last result mentions, "
        f"then ask a {task.hops}-hop question that needs the source and every result."
    )
    title, _, text = task.contents.partition("\n")
    return PROMPT.format(plan=plan, document=f"(Title: {title}) {text}")


@dataclass(frozen=True)
class Proposal:
    question: str
    answer: str
    error: str  # "" when the proposal parses strictly


def parse(turns: list[dict], hops: int) -> Proposal:
    """The proposal in the proposer's last generation, or the reason it is rejected."""
    searches = sum(t["action"] == "search" for t in turns)
    last = turns[-1]["generated"] if turns else ""
    found = _PROPOSAL.findall(last)
    if len(found) != 1 or any(last.count(tag) != 1 for tag in _TAGS):
        return Proposal("", "", "not exactly one <question>...</question><answer>...</answer>")
    question, answer = (s.strip() for s in found[0])
    if not normalize(question) or not normalize(answer):
        return Proposal(question, answer, "empty question or answer")
    if f" {normalize(answer)} " in f" {normalize(question)} ":
        return Proposal(question, answer, "the answer appears in the question")
    if searches != hops - 1:
        return Proposal(question, answer, f"{searches} searches for a {hops}-hop task (needs {hops - 1})")
    return Proposal(question, answer, "")


def format_score(kind: str, turns: list[dict], proposal: Proposal) -> float:
    if not proposal.error:
        return 1.0
    if kind == "strict":
        return 0.0
    text = turns[-1]["generated"] if turns else ""
    score, at = 0.0, 0
    for tag in _TAGS:
        at = text.find(tag, at)
        if at < 0:
            break
        score, at = score + 0.25, at + len(tag)
    return min(score, 0.75)  # full marks only for a proposal that parses strictly


def difficulty(k: int, m: int = 5) -> float:
    return (m - k) / (m - 1) if 0 < k < m else 0.0


def reward(format_weight: float, format_value: float, k: int | None, m: int = 5) -> float:
    """k is None for a proposal that was never scored (malformed or not admitted)."""
    return format_weight * format_value + (difficulty(k, m) if k is not None else 0.0)
