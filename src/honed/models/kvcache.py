"""A key/value cache for sampling that grows in place.

`transformers`' `DynamicCache` appends each new token with `torch.cat`, copying the whole
cache of every layer at every decoding step: quadratic in the completion length, and a tenth of
a small model's decoding time. The layers here allocate the room the sampler asks for once and
write each step into it, handing attention a view of the filled part. The arithmetic is the
same (the same keys and values, in the same order), so the samples are too.

Only plain full-attention layers are replaced; any other kind a model's config asks for
(sliding windows, linear attention) keeps `transformers`' own layer.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
from transformers import DynamicCache, PretrainedConfig
from transformers.cache_utils import DynamicLayer


class InPlaceLayer(DynamicLayer):
    """A full-attention cache layer with room for `capacity` positions, allocated on first use."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        batch, heads, _, _ = key_states.shape
        self.key_room = key_states.new_empty((batch, heads, self.capacity, key_states.shape[-1]))
        self.value_room = value_states.new_empty(
            (batch, heads, self.capacity, value_states.shape[-1])
        )
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self.length, self.length + key_states.shape[-2]
        if end > self.capacity:
            raise ValueError(f"the KV cache holds {self.capacity} positions; {end} were written")
        self.key_room[:, :, start:end] = key_states
        self.value_room[:, :, start:end] = value_states
        self.length = end
        self._views()
        return self.keys, self.values

    def append(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write one position, `key`/`value` [B, kv_heads, dim], and return the filled keys and
        values as [B·kv_heads, L, dim]: `update` for a single token in the fewest tensor
        operations, for the lean decoder, where each one costs about as much as its arithmetic.

        The `keys`/`values` attributes (`transformers`' [B, kv_heads, L, dim] views) are left as
        the last `update` or `reorder_cache` made them; `update` refreshes them.
        """
        if self.length >= self.capacity:
            raise ValueError(f"the KV cache holds {self.capacity} positions; one more was written")
        self.key_room.select(2, self.length).copy_(key)
        self.value_room.select(2, self.length).copy_(value)
        self.length += 1
        return self.key_rows[:, : self.length], self.value_rows[:, : self.length]

    def _views(self) -> None:
        self.keys = self.key_room[:, :, : self.length]
        self.values = self.value_room[:, :, : self.length]
        # the same rooms with batch and heads merged, for `append`'s attention
        self.key_rows = self.key_room.view(-1, *self.key_room.shape[2:])
        self.value_rows = self.value_room.view(-1, *self.value_room.shape[2:])

    def get_seq_length(self) -> int:
        return self.length

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Keep (or repeat) the rows `beam_idx`: the sampler drops finished rows this way."""
        if self.length:
            self.key_room = self.key_room.index_select(0, beam_idx)
            self.value_room = self.value_room.index_select(0, beam_idx)
            self._views()


def sampling_cache(config: PretrainedConfig, capacity: int) -> DynamicCache:
    """A `DynamicCache` for `config` whose full-attention layers grow in place up to `capacity`."""
    cache = DynamicCache(config=config)
    if cache.layers:
        cache.layers = [
            InPlaceLayer(capacity) if type(layer) is DynamicLayer else layer
            for layer in cache.layers
        ]
    else:  # no layer types in the config: layers are created on first use
        cache.layer_class_to_replicate = lambda: InPlaceLayer(capacity)
    return cache


def cache_argument(model: torch.nn.Module, cache: Any) -> dict[str, Any]:
    """`{keyword: cache}` for `model`'s forward. transformers 5 takes the cache as `cache` and
    warns that `past_key_values`, the name of every earlier release down to our floor, will be
    removed; a model whose forward does not name `cache` gets the older keyword. A peft wrapper
    passes keywords through to the model it wraps, so that model's forward decides."""
    target = model.get_base_model() if hasattr(model, "get_base_model") else model
    return {_cache_keyword(type(target)): cache}


@functools.cache
def _cache_keyword(cls: type) -> str:
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"
