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
        self._reusable: list[tuple[str, list[int], list]] = []  # (text, token ids, K/V) of the last call's contexts

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
        rows = [self._prefill(p, ids) for p, ids in zip(prompts, encoded)]  # (first-token logits, K/V per layer)
        width = max(len(ids) for ids in encoded)
        pads = [width - len(ids) for ids in encoded]
        cache = DynamicCache(ddp_cache_data=[
            tuple(torch.cat([torch.nn.functional.pad(kv[layer][j], (0, 0, pad, 0)) for (_, kv), pad in zip(rows, pads)])
                  for j in (0, 1))
            for layer in range(len(rows[0][1]))
        ])
        mask = torch.tensor([[0] * pad + [1] * len(ids) for ids, pad in zip(encoded, pads)], device=self.device)
        positions = torch.tensor([[len(ids)] for ids in encoded], device=self.device)
        logits = torch.cat([first for first, _ in rows])
        live = list(range(len(prompts)))  # prompt index of each row still decoding
        new: list[list[int]] = [[] for _ in prompts]
        kept: list[tuple[list[int], list]] = [([], [])] * len(prompts)  # ids in the cache, and their K/V
        for step in range(max_new_tokens):
            if step:
                input_ids = torch.tensor([[new[p][-1]] for p in live], device=self.device)
                mask = torch.cat([mask, mask.new_ones(len(live), 1)], dim=-1)
                logits = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                                    cache=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
                positions = positions + 1
            keep = []
            for row, (prompt, token) in enumerate(zip(live, logits.argmax(-1).tolist())):
                fed = len(new[prompt])  # generated tokens already in the cache
                if token not in self.eos_ids:
                    new[prompt].append(token)
                    tail = self.tokenizer.decode(new[prompt][-STOP_WINDOW:])
                    if not any(s in tail for s in stop) and step + 1 < max_new_tokens:
                        keep.append(row)
                        continue
                end = pads[prompt] + len(encoded[prompt]) + fed
                kept[prompt] = (encoded[prompt] + new[prompt][:fed],
                                [(layer.keys[row : row + 1, :, pads[prompt] : end].clone(),
                                  layer.values[row : row + 1, :, pads[prompt] : end].clone()) for layer in cache.layers])
            if not keep:
                break
            if len(keep) < len(live):
                index = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                mask, positions = mask[index], positions[index]
                live = [live[row] for row in keep]
        texts = [cut_at_stop(self.tokenizer.decode(ids, skip_special_tokens=True)) for ids in new]
        self._reusable = [(p + t, ids, kv) for p, t, (ids, kv) in zip(prompts, texts, kept)]
        return texts

    def _prefill(self, prompt: str, ids: list[int]) -> tuple[torch.Tensor, list]:
        """Last-position logits and K/V for one prompt.

        A prompt that strictly extends a context the previous call ended with (its prompt plus the
        returned text) reuses that context's K/V up to the first token where the two tokenisations
        differ. Only a trajectory's own history matches, so results never depend on other batches.
        """
        start, past = 0, None
        for text, old_ids, kv in self._reusable:
            if len(prompt) > len(text) and prompt.startswith(text):
                common = next((i for i, (a, b) in enumerate(zip(old_ids, ids)) if a != b), min(len(old_ids), len(ids)))
                start = min(common, len(ids) - 1)  # at least one token to compute logits from
                past = [(k[:, :, :start], v[:, :, :start]) for k, v in kv] if start else None
                break
        cache = DynamicCache(ddp_cache_data=past) if past else DynamicCache()
        suffix = torch.tensor([ids[start:]], device=self.device)
        positions = torch.arange(start, len(ids), device=self.device).unsqueeze(0)
        logits = self.model(input_ids=suffix, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
        return logits, [(layer.keys, layer.values) for layer in cache.layers]

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
