"""Hugging Face transformers backend: batched, left-padded greedy generation with stop strings."""

from __future__ import annotations

import copy

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from harness.checkpoints import ResolvedCheckpoint
from harness.protocol import cut_at_stop


class HFBackend:
    def __init__(self, ckpt: ResolvedCheckpoint, device: str = "cpu", dtype: str = "float32", threads: int | None = None) -> None:
        if threads:
            torch.set_num_threads(threads)
        self.ckpt = ckpt
        self.device = device
        self.dtype = dtype
        self.tokenizer = AutoTokenizer.from_pretrained(ckpt.location)
        self.model = AutoModelForCausalLM.from_pretrained(ckpt.location, dtype=getattr(torch, dtype))
        self.model.to(device).eval()
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.has_template = bool(self.tokenizer.chat_template)
        eos = self.model.generation_config.eos_token_id
        self.generation = GenerationConfig(
            do_sample=False,
            num_beams=1,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=eos if eos is not None else self.tokenizer.eos_token_id,
        )

    def chat_prompt(self, user: str) -> str:
        if not self.has_template:
            return user
        return self.tokenizer.apply_chat_template([{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True)

    def _encode(self, text: str) -> list[int]:
        # A chat template already writes its special tokens; raw text gets the tokenizer's own.
        return self.tokenizer(text, add_special_tokens=not self.has_template)["input_ids"]

    @torch.inference_mode()
    def generate(self, prompts: list[str], max_new_tokens: int, max_context_tokens: int, stop: tuple[str, ...]) -> list[str]:
        ids = [self._encode(p)[-max_context_tokens:] for p in prompts]
        self.tokenizer.padding_side = "left"
        batch = self.tokenizer.pad({"input_ids": ids}, return_tensors="pt").to(self.device)
        config = copy.deepcopy(self.generation)
        config.update(max_new_tokens=max_new_tokens, stop_strings=list(stop))
        out = self.model.generate(**batch, generation_config=config, tokenizer=self.tokenizer)
        new = out[:, batch["input_ids"].shape[1] :]
        texts = self.tokenizer.batch_decode(new, skip_special_tokens=True)
        return [cut_at_stop(t) for t in texts]

    def truncate(self, text: str, max_tokens: int) -> str:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return text if len(ids) <= max_tokens else self.tokenizer.decode(ids[:max_tokens])

    def describe(self) -> dict:
        return {
            "engine": "hf",
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "device": self.device,
            "dtype": self.dtype,
            "threads": torch.get_num_threads(),
            "chat_template": self.has_template,
            **self.ckpt.describe(),
        }
