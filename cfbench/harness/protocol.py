"""Protocol v1 (docs/protocol.md §2): Search-R1's prompt, actions and observations, bugs fixed.

Every string here is part of the protocol: changing one is a new protocol version.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from cfbench.harness.corpus import split_contents
from cfbench.harness.errors import CfbenchError
from cfbench.harness.retrievers import Hit

PROTOCOL_VERSION = "v1"

INSTRUCTION = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time "
    "you get new information. After reasoning, if you find you lack some knowledge, you can call a search "
    "engine by <search> query </search> and it will return the top searched results between <information> "
    "and </information>. You can search as many times as your want. If you find no further external "
    "knowledge needed, you can directly provide the answer inside <answer> and </answer>, without detailed "
    "illustrations. For example, <answer> Beijing </answer>. Question: {question}\n"
)
INVALID_ACTION = (
    "\nMy previous action is invalid. If I want to search, I should put the query between <search> and "
    "</search>. If I want to give the final answer, I should put the answer between <answer> and </answer>. "
    "Let me try again.\n"
)
STOP = ("</search>", "</answer>")

_ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclass(frozen=True)
class Knobs:
    """The shared tool budget; defaults are protocol v1's and every run records them."""

    topk: int = 3
    max_searches: int = 4  # search or invalid turns before the last, answer-only turn
    max_new_tokens: int = 500  # per generation call
    max_obs_tokens: int = 500  # an observation is cut to this many tokens
    max_context_tokens: int = 4096  # generation sees the last this-many tokens

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            floor = 0 if name == "max_searches" else 1
            if not isinstance(value, int) or value < floor:
                raise CfbenchError(f"knob {name} must be an integer >= {floor}, got {value!r}")

    def as_dict(self) -> dict:
        return asdict(self)


def normalize_question(question: str) -> str:
    """Search-R1's data builder's form (stripped, ending in "?"); shipped training data is stored in it."""
    question = question.strip()
    return question if question.endswith("?") else question + "?"


def user_prompt(question: str) -> str:
    """The instruction with the question normalised as Search-R1's data builder does."""
    return INSTRUCTION.format(question=normalize_question(question))


def parse_action(generated: str) -> tuple[str, str]:
    """("search" | "answer", content) for the first action tag in the new text, else ("invalid", "")."""
    match = _ACTION.search(generated)
    if match is None:
        return "invalid", ""
    return match.group(1), match.group(2).strip()


def cut_at_stop(text: str, stop: tuple[str, ...] = STOP) -> str:
    """The text up to and including the first stop string (engines may run a few characters past it)."""
    ends = [text.find(s) + len(s) for s in stop if s in text]
    return text[: min(ends)] if ends else text


def final_answer(generated_turns: list[str]) -> str:
    """The last <answer> in the model's own text only; never in the prompt or observations."""
    answers = [m.strip() for turn in generated_turns for m in _ANSWER.findall(turn)]
    return answers[-1] if answers else ""


def format_passages(hits: list[Hit]) -> str:
    lines = []
    for i, hit in enumerate(hits, start=1):
        title, text = split_contents(hit.contents)
        lines.append(f"Doc {i}(Title: {title}) {text}\n")
    return "".join(lines)


def observation(hits: list[Hit]) -> str:
    return f"\n\n<information>{format_passages(hits).strip()}</information>\n\n"
