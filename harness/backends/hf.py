"""Hugging Face transformers backend: batched, left-padded greedy decoding with stop strings.

The decoder drops a row from the batch (and from the KV cache) the step it finishes, so a batch
costs about what its longest row costs plus each row's own tokens, not rows x longest. That is what
makes the lockstep loop several times faster than one question at a time on a CPU.
"""

from __future__ import annotations

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from harness.checkpoints import ResolvedCheckpoint
from harness.protocol import cut_at_stop

STOP_WINDOW = 8  # tokens decoded at each step to spot a stop string that just completed


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
        self.has_template = bool(self.tokenizer.chat_template)
        eos = self.model.generation_config.eos_token_id
        eos = self.tokenizer.eos_token_id if eos is None else eos
        self.eos_ids = set(eos) if isinstance(eos, list) else {eos}
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(self.eos_ids)

    def chat_prompt(self, user: str) -> str:
        if not self.has_template:
            return user
        return self.tokenizer.apply_chat_template([{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True)

    def _encode(self, text: str) -> list[int]:
        # A chat template already writes its special tokens; raw text gets the tokenizer's own.
        return self.tokenizer(text, add_special_tokens=not self.has_template)["input_ids"]

    @torch.inference_mode()
    def generate(self, prompts: list[str], max_new_tokens: int, max_context_tokens: int, stop: tuple[str, ...]) -> list[str]:
        encoded = [self._encode(p)[-max_context_tokens:] for p in prompts]
        width = max(len(ids) for ids in encoded)
        input_ids = torch.tensor([[self.pad_id] * (width - len(ids)) + ids for ids in encoded], device=self.device)
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in encoded], device=self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        live = list(range(len(prompts)))  # prompt index of each row still decoding
        new: list[list[int]] = [[] for _ in prompts]
        for _ in range(max_new_tokens):
            logits = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                                cache=cache, use_cache=True).logits[:, -1]
            tokens = logits.argmax(-1).tolist()
            keep = []
            for row, (prompt, token) in enumerate(zip(live, tokens)):
                if token in self.eos_ids:
                    continue
                new[prompt].append(token)
                tail = self.tokenizer.decode(new[prompt][-STOP_WINDOW:])
                if not any(s in tail for s in stop):
                    keep.append(row)
            if not keep:
                break
            if len(keep) < len(live):
                index = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                mask, positions = mask[index], positions[index]
                live = [live[row] for row in keep]
            input_ids = torch.tensor([[new[p][-1]] for p in live], device=self.device)
            mask = torch.cat([mask, mask.new_ones(len(live), 1)], dim=-1)
            positions = positions[:, -1:] + 1
        return [cut_at_stop(self.tokenizer.decode(ids, skip_special_tokens=True)) for ids in new]

    def truncate(self, text: str, max_tokens: int) -> str:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return text if len(ids) <= max_tokens else self.tokenizer.decode(ids[:max_tokens])

    def describe(self) -> dict:
        return {
            "engine": "hf",
            "decoder": "greedy, finished rows pruned",
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "device": self.device,
            "dtype": self.dtype,
            "threads": torch.get_num_threads(),
            "chat_template": self.has_template,
            "hub_revision": getattr(self.model.config, "_commit_hash", None),
            **self.ckpt.describe(),
        }
