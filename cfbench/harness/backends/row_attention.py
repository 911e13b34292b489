"""Decoding attention that reads each row's own K/V columns only, for the continuous-batching engine (`HFBackend.stream`).

A Slots cache right-aligns rows of different lengths in one buffer, so a batched attention reads every row at the
longest row's width and masks the rest: over fixed1325's schedule at 32 rows that is 2.2 times the K/V a row holds,
and at this model's size the K/V reads are most of a decoding step's time. Here a decoding step (one query token per
row, `row_starts` given) runs one attention per row over the columns from its own start, with no mask; anything else
(prefill, the lockstep decoder, training) is transformers' SDPA attention unchanged.

Hand-written because transformers' attention functions take one mask for a padded batch: its paged attention (the
other way to skip padding) belongs to its ContinuousBatchingManager, which kv.py says why this engine does not use.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "cfbench_rows"


def row_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, row_starts=None, **kwargs):
    """Attention output [rows, 1, heads, head dim]: per row over key/value columns [row_starts[i], end) when decoding."""
    if row_starts is None or query.shape[2] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
    rows, heads, _, dim = query.shape
    groups = heads // key.shape[1]
    out = query.new_empty(rows, key.shape[1], groups, dim)
    for i, start in enumerate(row_starts):
        # One query token: its heads grouped by the K/V head they share (as transformers' pack_gqa does), so K/V
        # are read once per K/V head, never repeated.
        out[i] = torch.nn.functional.scaled_dot_product_attention(
            query[i].reshape(1, key.shape[1], groups, dim), key[i : i + 1, :, start:], value[i : i + 1, :, start:], scale=scaling
        )[0]
    return out.reshape(rows, heads, 1, dim).transpose(1, 2), None


AttentionInterface.register(NAME, row_attention)
AttentionMaskInterface.register(NAME, sdpa_mask)  # the mask the fallback reads, as for "sdpa"
