"""A scripted policy standing in for a model, for tests of the loop's control flow only.

It is not a model and never stands in for one elsewhere: every test of real behaviour uses a real
checkpoint. Its "tokens" are characters, which keeps the truncation arithmetic visible.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from cfbench.harness.backends import Completion
from cfbench.harness.protocol import cut_at_stop

USER = re.compile(r"Question: (.*?)\n</user>", re.DOTALL)


def question_of(context: str) -> str:
    return USER.search(context).group(1)


class ScriptedBackend:
    def __init__(self, policy: Callable[[str], str]) -> None:
        self.policy = policy
        self.calls: list[int] = []  # batch size of every generate call

    def chat_prompt(self, user: str) -> str:
        return f"<user>{user}</user>\n"

    def generate(self, prompts, max_new_tokens, max_context_tokens, stop):
        self.calls.append(len(prompts))
        return [written(cut_at_stop(self.policy(p[-max_context_tokens:]))[:max_new_tokens]) for p in prompts]

    def truncate(self, text: str, max_tokens: int) -> str:
        return text[:max_tokens]

    def describe(self) -> dict:
        return {"engine": "scripted", "model": "scripted", "weights_sha256": None}


def written(text: str) -> Completion:
    """A scripted turn as an engine's Completion: text only, no sampled ids (trained on the text's own ids)."""
    return Completion(text, len(text), "stop", None)
