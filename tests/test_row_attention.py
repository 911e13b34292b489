"""The continuous engine's decoding attention (backends/row_attention.py): each row over its own K/V columns gives
what SDPA over the padded, masked batch gives; every other call is SDPA itself."""

from __future__ import annotations

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from cfbench.harness.agent import run_stream
from cfbench.harness.backends import row_attention
from cfbench.harness.backends.hf import HFBackend
from cfbench.harness.checkpoints import resolve
from cfbench.harness.protocol import Knobs
from cfbench.harness.suite import load_suite


class Grouped(torch.nn.Module):  # what the attention functions read off a model's attention module
    num_key_value_groups = 3
    is_causal = True


def batch(lengths: list[int], queries: int = 1, generator=None):
    """Query [rows, 6 heads, queries, 16], K/V [rows, 2 heads, width, 16] right-aligned, the padded batch's bool mask."""
    rows, width = len(lengths), max(lengths)
    q = torch.randn(rows, 6, queries, 16, generator=generator)
    k, v = (torch.randn(rows, 2, width, 16, generator=generator) for _ in range(2))
    starts = [width - n for n in lengths]
    mask = torch.arange(width).unsqueeze(0) >= torch.tensor(starts).unsqueeze(1)
    return q, k, v, starts, mask[:, None, None, :].expand(rows, 1, queries, width)


def test_each_row_over_its_own_columns_equals_the_padded_masked_batch():
    q, k, v, starts, mask = batch([7, 300, 41, 1, 128], generator=torch.Generator().manual_seed(0))
    padded, _ = sdpa_attention_forward(Grouped(), q, k, v, mask, scaling=0.25)
    rows, _ = row_attention.row_attention(Grouped(), q, k, v, mask, scaling=0.25, row_starts=starts)
    assert rows.shape == padded.shape == (5, 1, 6, 16)
    # float32 softmax-weighted sums over up to 300 columns, in another blocking and without the masked columns'
    # zeros: a few units in the last place
    torch.testing.assert_close(rows, padded, rtol=1e-5, atol=1e-6)
    # the grouped heads: query head h reads K/V head h // 3 (repeat_kv's order)
    alone = torch.nn.functional.scaled_dot_product_attention(q[1:2, 4:5], k[1:2, 1:2, starts[1] :], v[1:2, 1:2, starts[1] :], scale=0.25)
    torch.testing.assert_close(rows[1, 0, 4], alone[0, 0, 0], rtol=1e-5, atol=1e-6)


def test_without_row_starts_or_with_several_queries_it_is_sdpa_itself():
    generator = torch.Generator().manual_seed(1)
    for queries, row_starts in [(1, None), (4, [0, 0])]:
        q, k, v, _, mask = batch([9, 9], queries=queries, generator=generator)
        expected, _ = sdpa_attention_forward(Grouped(), q, k, v, mask, scaling=0.25)
        got, _ = row_attention.row_attention(Grouped(), q, k, v, mask, scaling=0.25, row_starts=row_starts)
        assert torch.equal(got, expected)


def test_the_loaded_engine_decodes_its_streamed_rows_with_it(tiny_llama, bm25, monkeypatch):
    """The kwarg reaches the attention function through transformers' forward: every decoding step of stream is per row."""
    seen = []
    original = row_attention.row_attention

    def spy(module, query, *args, row_starts=None, **kwargs):
        seen.append((query.shape[0], query.shape[2], row_starts))
        return original(module, query, *args, row_starts=row_starts, **kwargs)

    monkeypatch.setitem(row_attention.AttentionInterface._global_mapping, row_attention.NAME, spy)
    engine = HFBackend.load(resolve(str(tiny_llama)))
    assert engine.describe()["attention"] == row_attention.NAME
    run_stream(load_suite("mini").questions[:4], engine, bm25, Knobs(max_new_tokens=8, max_searches=1), rows=3)
    decoding = [s for s in seen if s[1] == 1 and s[2] is not None]
    assert decoding and all(len(starts) == rows for rows, _, starts in decoding)
    assert all(starts is None for _, queries, starts in seen if queries > 1)  # prefill stays SDPA
