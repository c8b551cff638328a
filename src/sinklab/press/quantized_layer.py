"""The layer of a quantized cache (:class:`QuantizedKVLayer`), a transformers ``DynamicLayer``:
this module imports transformers, so :func:`~.quantized.quantize_cache` imports it only when it
quantizes a cache. The design is in :mod:`.quantized`."""

from __future__ import annotations

import copy

import torch
from transformers.cache_utils import DynamicLayer


class QuantizedKVLayer(DynamicLayer):
    """A full-attention layer whose keys and values are held as the protected tokens in full
    precision, the quantized ``store`` and a full-precision tail; ``seen`` counts every token."""

    is_croppable = False

    def __init__(self, sink: tuple, store, keys: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__()
        self.lazy_initialization(keys, values)
        self.sink, self.store, self.seen = sink, store, sink[0].shape[2] + keys.shape[2]
        self.tail = store.absorb(keys, values, self.seen)

    def update(self, key_states, value_states, *args, **kwargs):
        self.seen += key_states.shape[-2]
        tail = (torch.cat([self.tail[0], key_states], 2), torch.cat([self.tail[1], value_states], 2))
        self.tail = self.store.absorb(*tail, self.seen)
        return self._assembled()

    def _assembled(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values attention reads, in one buffer each (the protected tokens, the store
        dequantized straight into its rows, the tail), which no copy follows: one write of the
        layer a step, as a dense layer's concatenation is."""
        (sink_k, sink_v), (tail_k, tail_v) = self.sink, self.tail
        start, end = sink_k.shape[2], sink_k.shape[2] + self.store.length
        keys = tail_k.new_empty(*tail_k.shape[:2], end + tail_k.shape[2], tail_k.shape[3])
        values = tail_v.new_empty(*tail_v.shape[:2], end + tail_v.shape[2], tail_v.shape[3])
        keys[:, :, :start], values[:, :, :start] = sink_k, sink_v
        self.store.dequantize_into(keys[:, :, start:end], values[:, :, start:end])
        keys[:, :, end:], values[:, :, end:] = tail_k, tail_v
        return keys, values

    def get_seq_length(self) -> int:
        return self.seen

    def branched(self) -> "QuantizedKVLayer":
        """A copy whose updates leave this layer as it is (:func:`~.cache.branch`)."""
        twin = copy.copy(self)
        twin.store = self.store.branched()
        return twin

    def held_tensors(self) -> list:
        """What the layer holds: the protected tokens, the packed store and the tail."""
        return [*self.sink, *self.store.tensors(), *self.tail]
