"""Model backends: text prompts in, continuations out (cut after the first stop string).

Every engine gets the same text prompts from the agent loop, so an engine never changes a score.
Evaluation decodes greedily; training rollouts sample (an engine's temperature and seed), and keep
the sampled token ids and their log-probs so the update trains on exactly what was sampled.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Completion:
    """One continuation as an engine finished it."""

    text: str  # cut after the first stop string, which it keeps
    tokens: int  # new tokens generated
    finish: str  # "stop" (a stop string or end of sequence) or "length" (max_new_tokens reached)
    stop: str | None  # the stop string that ended it, if one did
    ids: tuple[int, ...] | None = None  # the sampled token ids (end-of-sequence left out), where the engine gives them
    logprobs: tuple[float, ...] | None = None  # each id's log-probability under the distribution it was drawn from


def call_seed(seed: int, call: int) -> int:
    """The sampling seed of an engine's `call`-th generate call: in-process and served engines draw alike."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{call}".encode()).digest()[:8], "big") >> 1


class Backend(Protocol):
    def chat_prompt(self, user: str) -> str:
        """The user turn in the model's chat template with the generation prompt (raw text without one)."""
        ...

    def generate(self, prompts: list[str], max_new_tokens: int, max_context_tokens: int, stop: tuple[str, ...]) -> list[Completion]:
        """One continuation per prompt (greedy unless the engine samples); each prompt is cut to its last max_context_tokens tokens."""
        ...

    def truncate(self, text: str, max_tokens: int) -> str:
        """The text cut to its first max_tokens tokens."""
        ...

    def describe(self) -> dict:
        """Engine, model id, weights hash and every setting that can change an output."""
        ...
