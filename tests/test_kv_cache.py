"""The growing K/V layer gives exactly the logits of transformers' own concatenating cache, across
growth steps and dropped rows, while copying the cache only once per GROW tokens."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, DynamicCache

from cfbench.harness.backends.hf import HFBackend
from cfbench.harness.backends.kv import GROW, left_padded_cache
from cfbench.harness.checkpoints import resolve


def decode(model, prompts, cache_for, steps, drop_at):
    """Greedy steps over left-padded prompts (each prefilled alone); row 1 leaves the batch at step drop_at."""
    width = max(len(p) for p in prompts)
    firsts, rows = [], []
    for ids in prompts:
        own = DynamicCache()
        out = model(input_ids=torch.tensor([ids]), cache=own, use_cache=True, logits_to_keep=1)
        firsts.append(out.logits[:, -1])
        rows.append([(layer.keys, layer.values) for layer in own.layers])
    cache = cache_for(rows, width)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    positions = torch.tensor([[len(p)] for p in prompts])
    logits, seen = torch.cat(firsts), []
    for step in range(steps):
        seen.append(logits)
        if step == drop_at:
            keep = torch.tensor([0, 2])
            cache.batch_select_indices(keep)
            logits, mask, positions = logits[keep], mask[keep], positions[keep]
        mask = torch.cat([mask, mask.new_ones(len(mask), 1)], dim=-1)
        out = model(input_ids=logits.argmax(-1, keepdim=True), attention_mask=mask, position_ids=positions, cache=cache, use_cache=True)
        logits, positions = out.logits[:, -1], positions + 1
    return seen, cache


def concatenating(rows, width):
    pad = torch.nn.functional.pad
    return DynamicCache(
        ddp_cache_data=[
            tuple(torch.cat([pad(row[layer][j], (0, 0, width - row[layer][j].shape[-2], 0)) for row in rows]) for j in (0, 1))
            for layer in range(len(rows[0]))
        ]
    )


@torch.inference_mode()
def test_growing_cache_matches_the_concatenating_cache_exactly(tiny_llama):
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32).eval()
    prompts = [[5, 17, 230, 9, 44, 8], [71, 3], [900, 12, 13, 14]]
    steps = 2 * GROW + 10  # grows twice
    expected, _ = decode(model, prompts, concatenating, steps, drop_at=GROW // 2)
    got, cache = decode(model, prompts, left_padded_cache, steps, drop_at=GROW // 2)
    assert len(got) == len(expected) == steps
    for step, (a, b) in enumerate(zip(got, expected)):
        assert torch.equal(a, b), f"step {step}"
    layer = cache.layers[0]
    assert layer.keys.shape[0] == 2 and layer.get_seq_length() == 6 + steps  # the widest prompt, then one token per step
    assert layer._keys.shape[-2] - layer.get_seq_length() <= GROW  # spare room stays bounded


@torch.inference_mode()
def test_samples_of_one_prompt_each_continue_their_own_context(tiny_llama):
    """A group of samples of one prompt (greedy here, so they are equal token for token), each continued
    next turn from a kept K/V: contexts are told apart by identity, never by comparing tensors."""
    engine = HFBackend.load(resolve(str(tiny_llama)))
    prompt = engine.tokens.encode("Question: who wrote Hamlet?")
    first = engine.complete([prompt, prompt, prompt], 8, ())
    nexts = [prompt + engine.tokens.encode(c.text) + engine.tokens.encode(" <information>x</information>") for c in first]
    kept = list(engine._reusable)
    engine.complete(nexts, 4, ())
    assert len(kept) == 3 and all(old not in engine._reusable for old in kept)  # each was consumed by its own continuation


def test_contexts_of_ended_trajectories_are_freed_without_changing_an_output(tiny_llama, bm25):
    """A kept context no prompt of a generate call extends belongs to an ended trajectory: it is freed then.
    The outputs are those of an engine that keeps every context (the K/V reuse is unchanged)."""
    from cfbench.harness.agent import run_batch
    from cfbench.harness.protocol import Knobs
    from cfbench.harness.suite import load_suite

    class KeepsAll(HFBackend):  # the engine before contexts were freed: generate goes straight to complete
        def generate(self, prompts, max_new_tokens, max_context_tokens, stop):
            return self.complete([self.tokens.context(p, max_context_tokens) for p in prompts], max_new_tokens, stop)

    questions = load_suite("mini").questions[:8]
    knobs = Knobs(max_new_tokens=12, max_searches=2)
    freeing, keeping = HFBackend.load(resolve(str(tiny_llama))), KeepsAll.load(resolve(str(tiny_llama)))
    first = run_batch(questions[:4], freeing, bm25, knobs)
    assert len(freeing._reusable) == 4  # the batch's last turn: kept until the next call shows they ended
    ended = list(freeing._reusable)
    second = run_batch(questions[4:], freeing, bm25, knobs)
    assert not any(old in freeing._reusable for old in ended) and len(freeing._reusable) == 4
    before = run_batch(questions[:4], keeping, bm25, knobs) + run_batch(questions[4:], keeping, bm25, knobs)
    assert len(keeping._reusable) == 8  # it still holds the first batch's contexts
    assert [c.ids for t in first + second for c in t.completions] == [c.ids for t in before for c in t.completions]


def test_training_rollouts_free_the_engines_kept_contexts_when_they_end(tiny_llama, bm25):
    """core.rollouts frees what the engine keeps for next turns once every trajectory has ended: no K/V into the update."""
    from cfbench.harness.agent import run_batch
    from cfbench.harness.protocol import Knobs
    from cfbench.harness.suite import load_suite
    from cfbench.training.core.rollouts import rollouts

    questions, knobs = load_suite("mini").questions[:6], Knobs(max_new_tokens=12, max_searches=2)
    kept, freed = HFBackend.load(resolve(str(tiny_llama))), HFBackend.load(resolve(str(tiny_llama)))
    plain = run_batch(questions, kept, bm25, knobs)
    chunked = rollouts(questions, freed, bm25, knobs, 4)
    assert kept._reusable and freed._reusable == []
    assert [t.turns for t in chunked] == [t.turns for t in plain]  # freeing changes no output
