"""Continuous batching (hf `stream`, agent `run_stream`, `cfbench eval --batching continuous`): contexts share rows of
one K/V cache, a row that ends is refilled at once, a turn extends its own context's K/V and a fresh prompt the shared
prefix's. Each trajectory comes out as the lockstep loop makes it."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache

from cfbench.harness.agent import run_batch, run_stream
from cfbench.harness.backends import row_attention
from cfbench.harness.backends.hf import HFBackend
from cfbench.harness.backends.kv import SLOT_GROW, Slots
from cfbench.harness.checkpoints import resolve
from cfbench.harness.errors import CfbenchError
from cfbench.harness.evaluate import default_batching, evaluate
from cfbench.harness.protocol import Knobs
from cfbench.harness.suite import load_suite

KNOBS = Knobs(max_new_tokens=12, max_searches=2)


def alone(model, ids, fed):
    """Logits after each of `fed` tokens for one context decoded by itself (transformers' own cache, no padding)."""
    cache = DynamicCache()
    out = [model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True).logits[0, -1]]
    for i, token in enumerate(fed):
        position = torch.tensor([[len(ids) + i]])
        out.append(model(input_ids=torch.tensor([[token]]), position_ids=position, cache=cache, use_cache=True).logits[0, -1])
    return torch.stack(out)


@pytest.mark.parametrize("attention", ["sdpa", row_attention.NAME])
@torch.inference_mode()
def test_slots_decode_each_context_as_it_decodes_alone(tiny_llama, attention):
    """Three rows of different lengths; one row is refilled mid-way with a context longer than every row (the buffers
    widen on the left), decoding runs past the spare columns twice (they grow on the right), and a row leaves. With
    SDPA over the padded rows (masked) and with the engine's per-row attention (each row's own columns)."""
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32).eval()
    model.set_attn_implementation(attention)
    contexts = [[5, 17, 230, 9, 44, 8], [71, 3], [900, 12, 13, 14]]
    late = list(range(100, 160))  # replaces row 1 at step 20
    steps = 2 * SLOT_GROW + 10
    tokens = [[(7 * r + 3 * s) % 500 + 1 for s in range(steps)] for r in range(4)]  # fed to every row alike (no argmax ties)

    def prefill(ids):
        cache = DynamicCache()
        logits = model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True).logits[0, -1]
        return logits, [(layer.keys, layer.values) for layer in cache.layers]

    slots, rows, seen = Slots(3), [0, 1, 2], {0: [], 1: [], 2: [], 3: []}
    for r, ids in enumerate(contexts):
        logits, kv = prefill(ids)
        slots.place(r, kv)
        seen[r].append(logits)
    fed = {r: 0 for r in seen}
    for step in range(steps):
        if step == 20:  # row 1's context ends; another takes its row
            logits, kv = prefill(late)
            slots.place(1, kv)
            rows[1] = 3
            seen[3].append(logits)
        if step == SLOT_GROW + 30:  # row 2's context ends with nothing to follow it
            slots.keep([0, 1])
            rows = rows[:2]
        mask, positions, starts = slots.step("cpu")
        assert positions.squeeze(1).tolist() == [len(([*contexts, late])[c]) + fed[c] for c in rows]
        assert starts == [mask.shape[1] - 1 - n for n in positions.squeeze(1).tolist()]  # mask's first 1 in each row
        ids = torch.tensor([[tokens[c][fed[c]]] for c in rows])
        out = model(
            input_ids=ids, attention_mask=mask, position_ids=positions, cache=slots.cache, use_cache=True, row_starts=starts
        ).logits[:, -1]
        slots.advance()
        for r, c in enumerate(rows):
            fed[c] += 1
            seen[c].append(out[r])
    assert slots.buffers[0][0].shape[-2] - (slots.frame.end - slots.frame.start) <= 2 * SLOT_GROW + len(late)  # bounded spare room
    for c, ids in enumerate([*contexts, late]):
        expected = alone(model, ids, tokens[c][: fed[c]])
        # float32 sums over other row counts and (masked) padded columns: last-bit differences only
        torch.testing.assert_close(torch.stack(seen[c]), expected, rtol=1e-5, atol=1e-5)


def test_stream_gives_the_lockstep_trajectories(tiny_llama, bm25):
    """Fewer rows than questions, so rows are refilled; multi-turn trajectories continue their own K/V."""
    questions = load_suite("mini").questions[:10]
    engine = HFBackend.load(resolve(str(tiny_llama)))
    lockstep = run_batch(questions, engine, bm25, KNOBS)
    finished = []
    streamed = run_stream(questions, engine, bm25, KNOBS, rows=3, on_trajectory=lambda i, t: finished.append(i))
    assert [t.turns for t in streamed] == [t.turns for t in lockstep]
    assert [c.ids for t in streamed for c in t.completions] == [c.ids for t in lockstep for c in t.completions]
    assert sorted(finished) == list(range(10))  # each reported once
    assert sum(len(t.turns) for t in streamed) > 10  # continued trajectories, not one turn each


@pytest.mark.slow
def test_stream_gives_the_lockstep_trajectories_of_the_real_model(bm25):
    # the bundled search agent (the warm start), not the untrained SmolLM2, which never searches: the rows it
    # refills with observations are what continuous batching changes
    agent = HFBackend.load(resolve("smollm2-135m-search"))
    questions = load_suite("mini").questions[::4]
    knobs = Knobs(max_new_tokens=64, max_searches=2)
    lockstep = run_batch(questions, agent, bm25, knobs)
    streamed = run_stream(questions, agent, bm25, knobs, rows=6)
    assert [t.turns for t in streamed] == [t.turns for t in lockstep]
    assert any(turn["action"] == "search" for t in streamed for turn in t.turns)


def test_continuous_evaluation_writes_the_lockstep_record_and_resumes(tiny_llama, bm25, tmp_path):
    suite = load_suite("mini")
    engine = HFBackend.load(resolve(str(tiny_llama)))
    lockstep = evaluate(suite, engine, bm25, KNOBS, tmp_path / "lockstep", batch_size=8)
    record = json.loads((tmp_path / "lockstep" / "run.json").read_text())
    assert "batching" not in record  # older records still resume
    assert "attention" not in record["model"]  # lockstep decodes with SDPA: the per-row attention is stream's
    assert default_batching(engine, tmp_path / "lockstep", resume=True) == "lockstep"
    assert default_batching(engine, tmp_path / "new", resume=False) == "continuous"

    out, written = tmp_path / "continuous", []

    def stop_after_three_batches(n):
        written.append(n)
        if len(written) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        evaluate(suite, engine, bm25, KNOBS, out, batch_size=8, batching="continuous", on_questions=stop_after_three_batches)
    assert written == [8, 8, 8] and len((out / "trajectories.jsonl").read_text().splitlines()) == 24  # whole batches only
    assert default_batching(engine, out, resume=True) == "continuous"
    results = evaluate(suite, engine, bm25, KNOBS, out, batch_size=8, batching="continuous", resume=True)
    assert (out / "trajectories.jsonl").read_bytes() == (tmp_path / "lockstep" / "trajectories.jsonl").read_bytes()
    assert results["scores"] == lockstep["scores"] and results["batching"] == "continuous" and results["segments"] == 2
    assert results["model"]["attention"] == row_attention.NAME


def test_continuous_batching_is_refused_for_an_engine_without_stream(bm25, tmp_path):
    class Served:  # an engine that only answers generate, as the openai client and vllm do
        def describe(self):
            return {"engine": "openai"}

    with pytest.raises(CfbenchError, match="--batching continuous needs the hf engine"):
        evaluate(load_suite("mini"), Served(), bm25, KNOBS, tmp_path / "run", batching="continuous")
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_a_slots_copy_holds_one_layer_twice_not_the_whole_cache(monkeypatch):
    """Reallocating the buffers (a longer context placed) and keeping some rows copy layer by layer, each old layer
    freed before the next is copied: at every allocation at most one layer's old and new buffers are both alive."""
    import weakref

    layers, slots = 6, Slots(3)
    kv = [(torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)) for _ in range(layers)]
    for row in range(3):
        slots.place(row, kv)
    peaks = []

    def watched(name):
        original = getattr(torch.Tensor, name)

        def allocate(self, *args, **kwargs):
            peaks.append(sum(ref() is not None for ref in old) + len(peaks))
            return original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, allocate)

    for copy in ("new_zeros", "index_select"):
        old = [weakref.ref(t.untyped_storage()) for pair in slots.buffers for t in pair]  # storages: what a view keeps
        peaks.clear()
        watched(copy)
        if copy == "new_zeros":
            slots.place(0, [(torch.randn(1, 2, 5 + 2 * SLOT_GROW, 4),) * 2 for _ in range(layers)])  # needs more columns on the left
        else:
            slots.keep([2, 0])
        monkeypatch.undo()
        assert len(peaks) == 2 * layers and all(ref() is None for ref in old)  # every buffer copied, the old ones freed
        assert max(peaks) <= 2 * layers + 2  # the whole cache once plus one layer (k and v): copying it whole holds it twice
    assert [r[0][0].shape[-2] for r in (slots.row(0), slots.row(1))] == [5, 5 + 2 * SLOT_GROW]  # kept rows 2 and 0, in that order


def test_a_continued_row_does_not_pin_its_old_buffers_through_a_reallocation(tiny_llama, bm25, monkeypatch):
    """A continuation extends its row's K/V, read as views into the Slots buffers; placing it can reallocate them, and
    the old buffers' memory must be free when that copy ends (a view held across it keeps the whole old cache). The
    storages are watched, not the tensors: a view keeps its base's storage alive, not the base tensor object."""
    import weakref

    from cfbench.harness.backends import kv

    reallocate, alive = Slots._reallocate, []

    def watched(self, left):
        old = [weakref.ref(t.untyped_storage()) for pair in self.buffers for t in pair]
        reallocate(self, left)
        alive.append(sum(ref() is not None for ref in old))

    monkeypatch.setattr(Slots, "_reallocate", watched)
    monkeypatch.setattr(kv, "SLOT_GROW", 1)  # spare columns for one token: continuations' placements reallocate
    engine = HFBackend.load(resolve(str(tiny_llama)))
    run_stream(load_suite("mini").questions[:10], engine, bm25, KNOBS, rows=3)
    assert len(alive) > 5 and alive == [0] * len(alive)
