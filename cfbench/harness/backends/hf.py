"""Hugging Face transformers backend: batched, left-padded greedy decoding with stop strings.

The decoder drops a row from the batch (and from the KV cache) the step it finishes, so a batch
costs about what its longest row costs plus each row's own tokens, not rows x longest. That is what
makes the lockstep loop several times faster than one question at a time on a CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from cfbench.harness.backends import Completion, call_seed, row_attention
from cfbench.harness.backends.kv import Slots, left_padded_cache
from cfbench.harness.backends.onednn import use_linear
from cfbench.harness.backends.tokens import PromptTokens, TokenizedEngine
from cfbench.harness.checkpoints import ResolvedCheckpoint, load_model

STOP_WINDOW = 8  # tokens decoded at each step to spot a stop string that just completed
REUSE_TOKENS = 65536  # contexts whose K/V are kept for their next turn, counted in tokens


@dataclass(eq=False)  # identity: two samples of one prompt hold equal ids but their own K/V
class _Context:
    """A finished context: its prompt's ids, the ids now in its K/V (prompt + generated), the K/V."""

    prompt: list[int]
    ids: list[int]
    kv: list


@dataclass(eq=False)
class _Row:
    """A context being decoded in a Slots row: its prompt's ids, the ids in its K/V, what it generated so far."""

    key: Hashable
    prompt: list[int]
    ids: list[int]
    new: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    token: int | None = None  # picked and not yet fed


Work = tuple[Hashable, str]  # a caller's key and the prompt to continue


class HFBackend(TokenizedEngine):
    def __init__(
        self,
        model,
        tokens: PromptTokens,
        *,
        ckpt: ResolvedCheckpoint,
        dtype: str,
        temperature: float = 0.0,
        seed: int = 0,
        linear: str = "torch",
    ) -> None:
        """An engine around a loaded model: greedy for evaluation, or sampled (temperature > 0) for training rollouts.

        A sampling engine's k-th generate call draws from a generator seeded with call_seed(seed, k),
        as an OpenAIBackend with the same seed asks a server to (one request per call).
        """
        self.model, self.tokens, self.ckpt, self.dtype, self.linear = model, tokens, ckpt, dtype, linear
        self.device = str(model.device)
        eos = model.generation_config.eos_token_id
        eos = tokens.tokenizer.eos_token_id if eos is None else eos
        self.eos_ids = set(eos) if isinstance(eos, list) else {eos}
        self.temperature, self.seed, self.calls = temperature, seed, 0
        self._reusable: list[_Context] = []  # newest last

    @classmethod
    def load(
        cls, ckpt: ResolvedCheckpoint, device: str = "cpu", dtype: str = "float32", threads: int | None = None, linear: str = "torch"
    ) -> HFBackend:
        """`linear`: "torch" (nn.Linear as loaded) or "onednn" (weights packed once for oneDNN: onednn.py)."""
        if threads:
            torch.set_num_threads(threads)
        tokens = PromptTokens(AutoTokenizer.from_pretrained(ckpt.location))
        model = load_model(AutoModelForCausalLM, ckpt.location, getattr(torch, dtype)).to(device).eval()
        model.set_attn_implementation(row_attention.NAME)  # SDPA but in stream's decoding steps
        use_linear(model, linear, device)
        return cls(model, tokens, ckpt=ckpt, dtype=dtype, linear=linear)

    def release(self) -> None:
        """Free every kept context, for a caller whose trajectories have all ended (a training step, before its update)."""
        self._reusable = []

    def generate(self, prompts: list[str], max_new_tokens: int, max_context_tokens: int, stop: tuple[str, ...]) -> list[Completion]:
        encoded = [self.tokens.context(p, max_context_tokens) for p in prompts]
        # The agent loop continues every live trajectory in each call, so a kept context that no prompt here
        # extends belongs to one that has ended: free it now. Only what is never read again goes, so outputs
        # stay exactly the same (a server's client may split a turn over requests: serve-model calls complete).
        self._reusable = [old for old in self._reusable if any(self._extends(ids, old) for ids in encoded)]
        seed = call_seed(self.seed, self.calls)
        self.calls += 1
        return self.complete(encoded, max_new_tokens, stop, self.temperature, seed)

    @torch.inference_mode()
    def complete(
        self, encoded: list[list[int]], max_new_tokens: int, stop: tuple[str, ...], temperature: float = 0.0, seed: int = 0
    ) -> list[Completion]:
        """Continuations of token-id prompts, all decoded in one shrinking batch: greedy at temperature 0, else
        sampled from softmax(logits / temperature) with a generator seeded with `seed`."""
        generator = torch.Generator(device=self.model.device).manual_seed(seed) if temperature else None
        width = max(len(ids) for ids in encoded)
        pads = [width - len(ids) for ids in encoded]
        prefilled = [self._prefill(ids) for ids in encoded]  # (first-token logits, K/V per layer)
        logits = torch.cat([first for first, _ in prefilled])
        rows = [kv for _, kv in prefilled]
        del prefilled  # rows now hold each prompt's K/V alone, and left_padded_cache frees them as it copies
        cache = left_padded_cache(rows, width)
        mask = torch.tensor([[0] * pad + [1] * len(ids) for ids, pad in zip(encoded, pads)], device=self.device)
        positions = torch.tensor([[len(ids)] for ids in encoded], device=self.device)
        live = list(range(len(encoded)))  # prompt index of each row still decoding
        new: list[list[int]] = [[] for _ in encoded]
        logprobs: list[list[float]] = [[] for _ in encoded]
        ended: list[_Context | None] = [None] * len(encoded)
        for step in range(max_new_tokens):
            if step:
                input_ids = torch.tensor([[new[p][-1]] for p in live], device=self.device)
                mask = torch.cat([mask, mask.new_ones(len(live), 1)], dim=-1)
                logits = self.model(
                    input_ids=input_ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=1
                ).logits[:, -1]
                positions = positions + 1
            keep = []
            picked, picked_logprobs = _pick(logits, temperature, generator)
            for row, (prompt, token, logprob) in enumerate(zip(live, picked.tolist(), picked_logprobs.tolist())):
                fed = len(new[prompt])  # generated tokens already in the cache
                if token not in self.eos_ids:
                    new[prompt].append(token)
                    logprobs[prompt].append(logprob)
                    tail = self.tokens.tokenizer.decode(new[prompt][-STOP_WINDOW:])
                    if not any(s in tail for s in stop) and step + 1 < max_new_tokens:
                        keep.append(row)
                        continue
                end = pads[prompt] + len(encoded[prompt]) + fed
                ended[prompt] = _Context(
                    encoded[prompt],
                    encoded[prompt] + new[prompt][:fed],
                    [
                        (
                            layer.keys[row : row + 1, :, pads[prompt] : end].clone(),
                            layer.values[row : row + 1, :, pads[prompt] : end].clone(),
                        )
                        for layer in cache.layers
                    ],
                )
            if not keep:
                break
            if len(keep) < len(live):
                index = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                mask, positions = mask[index], positions[index]
                live = [live[row] for row in keep]
        self._remember(ended)
        return [self._finish(ids, lps, stop, max_new_tokens) for ids, lps in zip(new, logprobs)]

    def _finish(self, ids: list[int], logprobs: list[float], stop: tuple[str, ...], max_new_tokens: int) -> Completion:
        return self.tokens.completion(ids, logprobs, stop, max_new_tokens)

    def _remember(self, contexts: list[_Context]) -> None:
        """Keep the newest contexts' K/V within REUSE_TOKENS, dropping those the new ones extend."""
        kept = [old for old in self._reusable if not any(self._extends(c.prompt, old) for c in contexts)] + contexts
        total = 0
        for i in range(len(kept) - 1, -1, -1):
            total += len(kept[i].ids)
            if total > REUSE_TOKENS:
                kept = kept[i + 1 :]
                break
        self._reusable = kept

    @staticmethod
    def _extends(ids: list[int], old: _Context) -> int:
        """How many of old's cached ids ids can reuse, or 0 if ids does not continue old's own prompt.

        The boundary token of the old prompt may tokenise differently once text follows it, so the
        common prefix must cover the old prompt all but its last token.
        """
        common = next((i for i, (a, b) in enumerate(zip(old.ids, ids)) if a != b), min(len(old.ids), len(ids)))
        return common if len(ids) > len(old.prompt) and common >= len(old.prompt) - 1 else 0

    def _prefill(self, ids: list[int]) -> tuple[torch.Tensor, list]:
        """Last-position logits and K/V for one prompt.

        A prompt that continues a kept context (its own trajectory's previous turn: the old prompt
        is a prefix) reuses that context's K/V up to the first differing token. Another
        trajectory's K/V is never used, so results never depend on other batches.
        """
        for old in reversed(self._reusable):
            if common := self._extends(ids, old):
                self._reusable.remove(old)  # this turn's context supersedes it
                return self._extend(ids, common, old.kv)
        return self._extend(ids, 0, None)

    def _extend(self, ids: list[int], common: int, kv: list | None) -> tuple[torch.Tensor, list]:
        """Last-position logits and K/V of `ids`, reusing `kv` (K/V of ids that agree with `ids` on `common` tokens)."""
        start = min(common, len(ids) - 1)  # at least one token to compute logits from
        past = [(k[:, :, :start], v[:, :, :start]) for k, v in kv] if kv and start else None
        cache = DynamicCache(ddp_cache_data=past) if past else DynamicCache()
        suffix = torch.tensor([ids[start:]], device=self.device)
        positions = torch.arange(start, len(ids), device=self.device).unsqueeze(0)
        logits = self.model(input_ids=suffix, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
        return logits, [(layer.keys, layer.values) for layer in cache.layers]

    @torch.inference_mode()
    def stream(
        self,
        work: Iterator[Work],
        step: Callable[[list[tuple[Hashable, Completion]]], list[Work]],
        rows: int,
        max_new_tokens: int,
        max_context_tokens: int,
        stop: tuple[str, ...],
        prefix: str = "",
    ) -> None:
        """Greedy continuous batching: up to `rows` contexts decode together, and a context that ends gives its row
        to the next one at once instead of waiting for the longest (what a lockstep batch does, turn by turn).

        Contexts come from `work` (fresh prompts) and from `step`, which gets the completions that ended at one
        decoding step and returns the prompts that continue them (same keys): a continuation extends its own
        row's K/V (its previous prompt and generation), so only what was appended since is prefilled, and it
        decodes before fresh work. A fresh prompt reuses the K/V of `prefix` (the text all prompts start with,
        computed once) up to the first differing token. Each context decodes exactly as `complete` decodes it
        (the same stops, end of sequence and max_new_tokens; greedy picks); other rows only share the batch.

        Hand-written rather than transformers' ContinuousBatchingManager: that one stops only at end-of-sequence
        ids (no stop strings, so every turn would decode to max_new_tokens), cannot continue a finished request's
        cache with an appended observation, and runs in a background thread with paged attention over all of a
        batch's keys, a different kernel from this engine's prefill and decode (tests/test_kv_cache.py checks
        that this decoder gives the lockstep decoder's completions).
        """
        if self.temperature:
            raise ValueError("stream decodes greedily; sampled rollouts use generate")
        prefix_ids = self.tokens.encode(prefix) if prefix else []
        prefix_kv = self._extend(prefix_ids, 0, None)[1] if len(prefix_ids) > 1 else None
        slots, live, fresh = Slots(rows), [], iter(work)

        def start(row: int, key: Hashable, prompt: str) -> bool:
            """Prefill `prompt` into `row` (its own previous context's K/V there, else the prefix's) and pick its first token."""
            ids = self.tokens.context(prompt, max_context_tokens)
            own = live[row] if row < len(live) else None
            past_ids, past_kv = (own.ids, slots.row(row)) if own is not None else (prefix_ids, prefix_kv)
            logits, kv = self._extend(ids, _common(ids, past_ids) if past_kv else 0, past_kv)
            past_kv = None  # views into the slots' buffers: a reallocation in place() could not free the old ones
            if row == len(live):
                live.append(None)
            slots.place(row, kv)
            live[row] = _Row(key, ids, list(ids))
            token, logprob = _pick(logits, 0.0, None)
            return self._take(live[row], token.item(), logprob.item(), stop, max_new_tokens)

        ended = [row for row in range(rows) if (item := next(fresh, None)) is not None and start(row, *item)]
        if not live:
            return
        if len(live) < rows:
            slots.keep(list(range(len(live))))  # fewer prompts than rows
        while True:
            while ended:
                completions = [(live[row].key, self._finish(live[row].new, live[row].logprobs, stop, max_new_tokens)) for row in ended]
                rows_of = {live[row].key: row for row in ended}
                freed, ended = list(rows_of.values()), []
                for key, prompt in step(completions):
                    freed.remove(rows_of[key])
                    if start(rows_of[key], key, prompt):
                        ended.append(rows_of[key])
                for row in freed:
                    item = next(fresh, None)
                    live[row] = None
                    if item is not None and start(row, *item):
                        ended.append(row)
            if any(x is None for x in live):
                keep = [row for row, x in enumerate(live) if x is not None]
                if not keep:
                    return
                slots.keep(keep)
                live = [live[row] for row in keep]
            mask, positions, starts = slots.step(self.device)
            input_ids = torch.tensor([[x.token] for x in live], device=self.device)
            logits = self.model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions,
                cache=slots.cache,
                use_cache=True,
                logits_to_keep=1,
                row_starts=starts,
            ).logits[:, -1]
            slots.advance()
            picked, logprobs = _pick(logits, 0.0, None)
            for row, (x, token, logprob) in enumerate(zip(live, picked.tolist(), logprobs.tolist())):
                x.ids.append(x.token)
                if self._take(x, token, logprob, stop, max_new_tokens):
                    ended.append(row)

    def _take(self, row: _Row, token: int, logprob: float, stop: tuple[str, ...], max_new_tokens: int) -> bool:
        """Add a picked token to a row as `complete` does; True when the row's context has ended."""
        if token in self.eos_ids:
            return True
        row.new.append(token)
        row.logprobs.append(logprob)
        row.token = token
        tail = self.tokens.tokenizer.decode(row.new[-STOP_WINDOW:])
        return any(s in tail for s in stop) or len(row.new) >= max_new_tokens

    def describe(self) -> dict:
        return {
            "engine": "hf",
            "decoder": f"sampled at temperature {self.temperature}, seed {self.seed}, finished rows pruned"
            if self.temperature
            else "greedy, finished rows pruned",
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "device": self.device,
            "dtype": self.dtype,
            **({"linear": self.linear} if self.linear != "torch" else {}),  # records made before --linear existed still resume
            **({"attention": attention} if (attention := self.model.config._attn_implementation) != "sdpa" else {}),  # as linear
            "threads": torch.get_num_threads(),
            "chat_template": self.tokens.has_template,
            "hub_revision": getattr(self.model.config, "_commit_hash", None),
            **self.ckpt.describe(),
        }


def _common(a: list[int], b: list[int]) -> int:
    """How many leading ids two sequences share."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _pick(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's next token (argmax, or a draw at `temperature`) and its log-probability under that distribution."""
    scaled = logits.float() / temperature if temperature else logits.float()
    logprobs = torch.log_softmax(scaled, dim=-1)
    tokens = torch.multinomial(logprobs.exp(), 1, generator=generator).squeeze(-1) if temperature else logits.argmax(-1)
    return tokens, logprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
