"""The one place prompts become token ids, so every engine sees the same tokens for the same text.

In-process engines (hf, vllm) and the OpenAI-compatible client all build the chat prompt, cut the
context to its last max_context_tokens tokens and cap observations with this class; the client
then sends token ids, so a server never re-tokenises differently.
"""

from __future__ import annotations

from transformers import AutoTokenizer

from cfbench.harness.backends import Completion
from cfbench.harness.checkpoints import resolve
from cfbench.harness.protocol import cut_at_stop


class PromptTokens:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.has_template = bool(tokenizer.chat_template)

    @classmethod
    def load(cls, spec: str) -> PromptTokens:
        """The tokenizer of a local checkpoint dir, a bundled model or a hub id (tokenizer files only)."""
        return cls(AutoTokenizer.from_pretrained(resolve(spec).location))

    def chat_prompt(self, user: str) -> str:
        """The user turn in the chat template with the generation prompt (the raw text without one)."""
        if not self.has_template:
            return user
        return self.tokenizer.apply_chat_template([{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True)

    def encode(self, text: str) -> list[int]:
        # A chat template already writes its special tokens; raw text gets the tokenizer's own.
        return self.tokenizer(text, add_special_tokens=not self.has_template)["input_ids"]

    def context(self, prompt: str, max_context_tokens: int) -> list[int]:
        """The prompt's ids cut to its last max_context_tokens tokens."""
        return self.encode(prompt)[-max_context_tokens:]

    def text_ids(self, text: str) -> list[int]:
        """Ids of a piece of text inside a sequence (no special tokens)."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def completion(self, ids: list[int], logprobs: list[float], stop: tuple[str, ...], max_new_tokens: int) -> Completion:
        """A Completion of sampled ids (end of sequence left out): their text cut after the first stop string."""
        cut = cut_at_stop(self.decode(ids), stop)
        hit = next((s for s in stop if cut.endswith(s)), None)  # only a stop string that occurs ends the cut
        ended_early = hit is not None or len(ids) < max_new_tokens  # a stop string or end of sequence
        return Completion(cut, len(ids), "stop" if ended_early else "length", hit, tuple(ids), tuple(logprobs))

    def truncate(self, text: str, max_tokens: int) -> str:
        """The text cut to its first max_tokens tokens."""
        ids = self.text_ids(text)
        return text if len(ids) <= max_tokens else self.tokenizer.decode(ids[:max_tokens])


class TokenizedEngine:
    """Backend methods every engine answers from its PromptTokens (`self.tokens`)."""

    tokens: PromptTokens

    def chat_prompt(self, user: str) -> str:
        return self.tokens.chat_prompt(user)

    def truncate(self, text: str, max_tokens: int) -> str:
        return self.tokens.truncate(text, max_tokens)
