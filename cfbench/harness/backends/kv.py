"""A K/V cache layer with room to grow: decoding writes each new token into spare capacity.

transformers' DynamicLayer concatenates every step, copying the whole cache once per token and
layer (at a 2,000-token context that copy cost more than the attention itself in a profile of
`cfbench eval`), and its StaticLayer preallocates the full length for every row and cannot drop
finished rows. This layer grows in chunks, so a copy happens once per GROW tokens, and drops rows
like DynamicLayer. Attention reads a view of the filled part: the same values, so the same
results (tests/test_engines.py compares trajectories with and without it).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

GROW = 64  # tokens of spare capacity added when a layer is full


class GrowingLayer(DynamicLayer):
    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        """A layer over buffers [batch, kv heads, capacity, head dim] whose first `length` positions are filled."""
        super().__init__()
        self.device, self.is_initialized = keys.device, True
        self._keys, self._values, self.length = keys, values, length
        self._expose()

    @staticmethod
    def _room(filled: torch.Tensor) -> torch.Tensor:
        batch, heads, length, dim = filled.shape
        buffer = filled.new_empty(batch, heads, length + GROW, dim)
        buffer[:, :, :length] = filled
        return buffer

    def _expose(self) -> None:
        self.keys, self.values = self._keys[:, :, : self.length], self._values[:, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        new = key_states.shape[-2]
        if self.length + new > self._keys.shape[-2]:
            self._keys, self._values = self._room(self.keys), self._room(self.values)
        self._keys[:, :, self.length : self.length + new] = key_states
        self._values[:, :, self.length : self.length + new] = value_states
        self.length += new
        self._expose()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._keys, self._values = self._keys[indices], self._values[indices]
        self._expose()


def left_padded_cache(rows: list[list[tuple[torch.Tensor, torch.Tensor]]], width: int) -> DynamicCache:
    """One batch cache from each row's own (keys, values) per layer, right-aligned at `width` positions.

    Each row's tensors are released as soon as they are copied (the list entry becomes None), so the
    batch and its rows are never both held whole.
    """
    first = rows[0][0][0]
    shape = (len(rows), first.shape[1], width + GROW, first.shape[3])
    buffers = [(first.new_zeros(shape), first.new_zeros(shape)) for _ in rows[0]]
    for i in range(len(rows)):
        for (keys, values), (k, v) in zip(buffers, rows[i]):
            keys[i, :, width - k.shape[-2] : width] = k[0]
            values[i, :, width - v.shape[-2] : width] = v[0]
        rows[i] = None
    cache = DynamicCache()
    cache.layers = [GrowingLayer(keys, values, width) for keys, values in buffers]
    return cache
