"""Model backends: text prompts in, greedy continuations out (cut after the first stop string).

Every engine gets the same text prompts from the agent loop, so an engine never changes a score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Completion:
    """One continuation as an engine finished it."""

    text: str  # cut after the first stop string, which it keeps
    tokens: int  # new tokens generated
    finish: str  # "stop" (a stop string or end of sequence) or "length" (max_new_tokens reached)
    stop: str | None  # the stop string that ended it, if one did


class Backend(Protocol):
    def chat_prompt(self, user: str) -> str:
        """The user turn in the model's chat template with the generation prompt (raw text without one)."""
        ...

    def generate(self, prompts: list[str], max_new_tokens: int, max_context_tokens: int, stop: tuple[str, ...]) -> list[str]:
        """One greedy continuation per prompt; each prompt is cut to its last max_context_tokens tokens."""
        ...

    def truncate(self, text: str, max_tokens: int) -> str:
        """The text cut to its first max_tokens tokens."""
        ...

    def describe(self) -> dict:
        """Engine, model id, weights hash and every setting that can change an output."""
        ...
