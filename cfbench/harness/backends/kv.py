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


SLOT_GROW = 128  # columns of spare capacity added when a Slots buffer is full


class _Frame:
    """The filled columns [start, end) that every layer of a Slots cache exposes to attention."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end


class SlotLayer(DynamicLayer):
    """One layer of a Slots cache: decoding writes each row's new token at column `end` of the shared frame."""

    def __init__(self, frame: _Frame, keys: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__()
        self.device, self.is_initialized = keys.device, True
        self.frame, self._keys, self._values = frame, keys, values

    @property
    def keys(self) -> torch.Tensor:
        return self._keys[:, :, self.frame.start : self.frame.end]

    @keys.setter
    def keys(self, value) -> None:  # DynamicLayer.__init__ assigns it; the buffers are the state
        pass

    @property
    def values(self) -> torch.Tensor:
        return self._values[:, :, self.frame.start : self.frame.end]

    @values.setter
    def values(self, value) -> None:
        pass

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        start, end = self.frame.start, self.frame.end
        self._keys[:, :, end : end + 1] = key_states
        self._values[:, :, end : end + 1] = value_states
        return self._keys[:, :, start : end + 1], self._values[:, :, start : end + 1]

    def get_seq_length(self) -> int:
        return self.frame.end - self.frame.start


class Slots:
    """A fixed set of rows, each one context's K/V, decoded together one token per row per step.

    Rows hold contexts of different lengths, right-aligned at column `end` (left of a row's own
    columns is masked). A row whose context ends is refilled in place with another context's K/V
    (continuous batching), so the other rows are neither copied nor waited for. The cache exposes the
    columns [end - longest row, end) as a view, and each row's first column (`step`) lets attention read
    a row from its own start (row_attention.py); the buffers are reallocated (one copy) only when a
    placed row needs more columns on the left or decoding fills the spare columns on the right. A copy
    (reallocation, `keep`) goes layer by layer, each old layer freed before the next is copied, so it
    holds one layer twice, not the whole cache (fixed1325 at 32 rows: the cache is GBs).
    """

    def __init__(self, rows: int) -> None:
        self.lengths = [0] * rows  # ids in each row's K/V
        self.buffers: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.frame = _Frame(0, 0)
        self.cache = DynamicCache()

    def row(self, row: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The row's (keys, values) per layer, [1, kv heads, its length, head dim] views into the buffers."""
        end, length = self.frame.end, self.lengths[row]
        return [(k[row : row + 1, :, end - length : end], v[row : row + 1, :, end - length : end]) for k, v in self.buffers]

    def place(self, row: int, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Put one context's K/V (per layer [1, kv heads, length, head dim]) into `row`, replacing what it held."""
        length = kv[0][0].shape[-2]
        if not self.buffers:
            first = kv[0][0]
            shape = (len(self.lengths), first.shape[1], length + SLOT_GROW, first.shape[3])
            self.buffers = [(first.new_zeros(shape), first.new_zeros(shape)) for _ in kv]
            self.frame.start = self.frame.end = length
        elif length > self.frame.end:
            self._reallocate(length)
        end = self.frame.end
        for (keys, values), (k, v) in zip(self.buffers, kv):
            keys[row, :, end - length : end] = k[0]
            values[row, :, end - length : end] = v[0]
        self.lengths[row] = length
        self._expose()

    def step(self, device) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """The attention mask [rows, columns + 1], positions [rows, 1] and each row's first column of the next decoding
        step (row_attention.py reads a row from there); room for it."""
        if self.frame.end == self.buffers[0][0].shape[-2]:
            self._reallocate(self.frame.end - self.frame.start)
        width = self.frame.end - self.frame.start
        lengths = torch.tensor(self.lengths, device=device)
        mask = (torch.arange(width + 1, device=device).unsqueeze(0) >= (width - lengths).unsqueeze(1)).long()
        return mask, lengths.unsqueeze(1), [width - n for n in self.lengths]

    def advance(self) -> None:
        """After a step: every row holds one more token."""
        self.frame.end += 1
        self.lengths = [n + 1 for n in self.lengths]

    def keep(self, rows: list[int]) -> None:
        """Only these rows stay, in this order (one copy of the buffers)."""
        index = torch.tensor(rows, device=self.buffers[0][0].device)
        self.cache.layers = []  # its views hold the old buffers: each old layer is freed as soon as its copy is made
        for i, (k, v) in enumerate(self.buffers):
            self.buffers[i] = (k.index_select(0, index), v.index_select(0, index))
        self.lengths = [self.lengths[r] for r in rows]
        self._expose()

    def _reallocate(self, left: int) -> None:
        """New buffers with `left` columns before `end` and SLOT_GROW spare on both sides; the filled columns copied over.

        The spare columns on the left let the next few longer contexts (a turn's continuation with its observation) be
        placed without another copy; attention never reads them.
        """
        width = self.frame.end - self.frame.start
        left = max(left, width) + SLOT_GROW
        self.cache.layers = []  # its views hold the old buffers: each old layer is freed as soon as its copy is made
        for i, (keys, values) in enumerate(self.buffers):
            batch, heads, _, dim = keys.shape
            new_keys, new_values = (
                keys.new_zeros(batch, heads, left + SLOT_GROW, dim),
                values.new_zeros(batch, heads, left + SLOT_GROW, dim),
            )
            new_keys[:, :, left - width : left] = keys[:, :, self.frame.start : self.frame.end]
            new_values[:, :, left - width : left] = values[:, :, self.frame.start : self.frame.end]
            self.buffers[i] = (new_keys, new_values)
        self.frame.start, self.frame.end = left - width, left
        self._expose()

    def _expose(self) -> None:
        self.frame.start = self.frame.end - max(self.lengths)
        self.cache.layers = [SlotLayer(self.frame, k, v) for k, v in self.buffers]
