"""A KV cache layer whose prompt is stored once for every row of a batch.

A sampling check draws thousands of continuations of one prompt: every row of the masked
batch cache (:class:`~specviz.core.batch_runners.BatchRunner`) starts with the same prompt
columns. Copied per row, they dominate the cache (a 37-token prompt against 8 new tokens:
80% of it) and every fork, append and attention pass moves them again. Here the prompt's
keys and values stay one [1, H, P, D] block and each row keeps only its own columns after
it, [B, H, S, D]; :func:`~specviz.core.batch_runners.grouped_attention` reads the prompt
block once per key/value head for all rows. Any other reader (SDPA on one row, CUDA, tree
attention) gets the whole [B, H, P + S, D] keys, built on the fly.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer

__all__ = ["SharedPrefixLayer", "share_prefix"]


class SharedPrefixLayer(DynamicLayer):
    """One layer's cache: a prompt shared by every row (``prefix_keys`` / ``prefix_values``,
    [1, H, P, D]) and each row's own columns after it (``keys`` / ``values``, [B, H, S, D]).

    ``split`` is set by the batch runner while an attention function that adds the prompt
    itself runs (:func:`~specviz.core.batch_runners.grouped_attention`): ``update`` then
    returns the rows' own columns only; otherwise the whole keys and values."""

    def __init__(self, prefix_keys: torch.Tensor, prefix_values: torch.Tensor, rows: int) -> None:
        super().__init__()
        self.prefix_keys, self.prefix_values = prefix_keys, prefix_values
        self.device = prefix_keys.device
        _, H, _, D = prefix_keys.shape
        self.keys = prefix_keys.new_empty(rows, H, 0, D)
        self.values = prefix_values.new_empty(rows, prefix_values.shape[1], 0, D)
        self.is_initialized = True
        self.split = False

    @property
    def prefix_length(self) -> int:
        return int(self.prefix_keys.shape[-2])

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        self.keys = torch.cat([self.keys, key_states], dim=-2)
        self.values = torch.cat([self.values, value_states], dim=-2)
        if self.split:
            return self.keys, self.values
        return self.whole(self.keys, self.values)

    def whole(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The rows' columns ``keys``/``values`` [B, H, S, D] behind the prompt: [B, H, P + S, D]."""
        B = keys.shape[0]
        pk = self.prefix_keys.expand(B, -1, -1, -1)
        pv = self.prefix_values.expand(B, -1, -1, -1)
        return torch.cat([pk, keys], dim=-2), torch.cat([pv, values], dim=-2)

    def get_seq_length(self) -> int:
        return self.prefix_length + int(self.keys.shape[-2])

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative count of columns, got {tokens_to_remove}")
        n = -tokens_to_remove
        if n > self.keys.shape[-2]:
            raise ValueError(
                f"cannot crop {n} columns: only {self.keys.shape[-2]} follow the shared prompt"
            )
        if n:
            self.keys = self.keys[..., :-n, :]
            self.values = self.values[..., :-n, :]

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.keys = self.keys.repeat_interleave(repeats, dim=0)
        self.values = self.values.repeat_interleave(repeats, dim=0)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.keys = self.keys[indices, ...]
        self.values = self.values[indices, ...]

    def reorder_cache(self, beam_idx: torch.Tensor) -> None:
        self.batch_select_indices(beam_idx)


def share_prefix(cache, rows: int) -> None:
    """Turn a one-row cache holding a prompt into ``rows`` rows that share it: plain dynamic
    layers become :class:`SharedPrefixLayer`; any other kind (sliding windows, ...) is copied
    per row as before."""
    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicLayer and layer.is_initialized and layer.keys.numel():
            cache.layers[i] = SharedPrefixLayer(layer.keys, layer.values, rows)
        else:
            layer.batch_repeat_interleave(rows)
