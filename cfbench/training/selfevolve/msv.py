"""MSV admission: a candidate enters training only if source-aware and source-blind majorities agree.

The solver answers the candidate 3 times with the source passage in its prompt and 3 times without
(the protocol's own prompt). A majority is an answer that at least 2 of the 3 share under the
answer matcher; the candidate is admitted only when both majorities exist and match each other, and
the source-aware majority then replaces the draft label. 6 generations per candidate.
"""

from __future__ import annotations

from dataclasses import dataclass

from cfbench.harness import protocol
from cfbench.training.core.answers import matches

SAMPLES = 3  # per side


def source_aware_prompt(question: str, contents: str) -> str:
    title, _, text = contents.partition("\n")
    return f"Source document: (Title: {title}) {text}\n" + protocol.user_prompt(question)


def majority(answers: list[str]) -> str | None:
    """The first answer that at least 2 of the answers match, or None."""
    for answer in answers:
        if answer and sum(matches(other, answer) for other in answers) >= 2:
            return answer
    return None


@dataclass(frozen=True)
class Verdict:
    admitted: bool
    label: str  # the adopted label: the source-aware majority when admitted
    aware: list[str]
    blind: list[str]
    aware_majority: str | None
    blind_majority: str | None


def admit(aware: list[str], blind: list[str]) -> Verdict:
    a, b = majority(aware), majority(blind)
    ok = a is not None and b is not None and matches(a, b)
    return Verdict(ok, a if ok else "", aware, blind, a, b)
