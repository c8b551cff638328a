"""The cache layers a policy leaves behind, as transformers ``DynamicLayer`` subclasses. This module
imports transformers, so :mod:`.press` and :mod:`.quantizer` import it only when they rewrite a cache
(``import sinklab.kvcache`` stays light).

A rewritten layer holds some of the tokens it was fed, or holds them differently, and keeps
counting every token, so:

* positions continue at the true position: ``get_seq_length()`` answers the tokens seen (C, then
  C + n), which is where transformers places the next token when no ``position_ids`` are given,
  and how ``generate`` tells which tokens of a conversation the cache has not seen; kept keys keep
  the rotation of their original positions;
* the attention mask numbers the held keys as the columns right before the new tokens
  (``get_mask_sizes``), so every new token sees every held key and the new tokens before it.

Layers may hold different numbers of keys (PyramidKV). transformers builds one mask per forward
from one layer's sizes, so every rewritten layer of a cache (its ``group``) reports the widest
layer's size, and the attention function (:mod:`.narrowed`) cuts each layer's mask to its own keys.
"""

from __future__ import annotations

import copy
from typing import Optional

import torch
from transformers.cache_utils import DynamicLayer, QuantoQuantizedLayer


class RewrittenLayer(DynamicLayer):
    """A full-attention layer after a policy: ``seen`` counts every token fed, :meth:`stored` the
    keys held; ``group`` is the list of the cache's rewritten layers, whose widest sets the mask."""

    is_croppable = False  # cropping n tokens would cut kept context keys once fewer were fed

    def __init__(self, seen: int, group: Optional[list] = None) -> None:
        super().__init__()
        self.seen, self.group = seen, [] if group is None else group
        self.group.append(self)

    def stored(self) -> int:
        raise NotImplementedError

    def get_seq_length(self) -> int:
        return self.seen

    def tokens_seen(self) -> int:
        """Every token fed (sinklab's hooks read it, with :meth:`kept_tokens`, to tell a cache that
        evicted: there a key's slot is not its position)."""
        return self.seen

    def kept_tokens(self) -> int:
        return self.stored()

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        width = max(layer.stored() for layer in self.group)
        return width + query_length, self.seen - width

    def branched(self) -> "RewrittenLayer":
        """A copy whose updates leave this layer as it is (:func:`~.rewriting.branch`)."""
        return copy.copy(self)


class PressedLayer(RewrittenLayer):
    """A layer after a press: ``keys``/``values`` hold only the kept positions (``positions``:
    (B, Hkv, K) on the CPU, ascending), then every token fed after the compression."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, seen: int, group: list, positions: torch.Tensor) -> None:
        super().__init__(seen, group)
        self.lazy_initialization(keys, values)
        self.keys, self.values, self.positions, self.compressed_at = keys, values, positions, seen

    def held_positions(self) -> torch.Tensor:
        """(B, Hkv, stored) the position of every key the layer holds: the kept ones, then the
        tokens fed since the compression."""
        later = torch.arange(self.compressed_at, self.seen).expand(*self.positions.shape[:2], -1)
        return torch.cat([self.positions, later], -1)

    def update(self, key_states, value_states, *args, **kwargs):
        self.seen += key_states.shape[-2]
        return DynamicLayer.update(self, key_states, value_states, *args, **kwargs)

    def stored(self) -> int:
        return self.keys.shape[-2]


#: The attribute of the keys a :class:`RaggedLayer` returns that says which slots each head holds
#: ((1, H, 1, K) bool; the others are padding).
PADDING = "sinklab_held"


class RaggedLayer(RewrittenLayer):
    """A layer whose KV heads hold different numbers of keys (AdaKV; batches of one): one (K_h, D)
    tensor of keys and one of values per head, so its bytes are the keys kept. Each step gives
    attention every head padded at the front to the longest (the new tokens last in every head,
    where the mask's last columns expect them), and marks the padding on the keys it returns
    (:data:`PADDING`), which the pressed attention (:mod:`.narrowed`) masks."""

    def __init__(self, keys: list, values: list, seen: int, group: list, positions: list) -> None:
        super().__init__(seen, group)
        self.lazy_initialization(keys[0][None, None], values[0][None, None])
        self.head_keys, self.head_values, self.positions = keys, values, positions

    def update(self, key_states, value_states, *args, **kwargs):
        self.seen += key_states.shape[-2]
        self.head_keys = [torch.cat([k, key_states[0, h]], 0) for h, k in enumerate(self.head_keys)]
        self.head_values = [torch.cat([v, value_states[0, h]], 0) for h, v in enumerate(self.head_values)]
        return self._padded()

    def _padded(self) -> tuple[torch.Tensor, torch.Tensor]:
        widest, first = self.stored(), self.head_keys[0]
        keys = first.new_zeros(1, len(self.head_keys), widest, first.shape[-1])
        values = first.new_zeros(1, len(self.head_values), widest, self.head_values[0].shape[-1])
        held = torch.zeros(1, len(self.head_keys), 1, widest, dtype=torch.bool, device=first.device)
        for h, (k, v) in enumerate(zip(self.head_keys, self.head_values)):
            keys[0, h, widest - k.shape[0] :], values[0, h, widest - v.shape[0] :] = k, v
            held[0, h, 0, widest - k.shape[0] :] = True
        setattr(keys, PADDING, held)
        return keys, values

    def stored(self) -> int:
        return max(k.shape[0] for k in self.head_keys)

    def held_tensors(self) -> list:
        return [*self.head_keys, *self.head_values]


class QuantizedKVLayer(RewrittenLayer):
    """A layer whose keys and values are held as the protected tokens in full precision, the
    quantized ``store`` and a full-precision tail; ``slots`` counts the tokens held (all of them,
    unless a press before the quantizer kept some; ``seen`` is then more)."""

    def __init__(
        self,
        sink: tuple,
        store,
        keys: torch.Tensor,
        values: torch.Tensor,
        seen: Optional[int] = None,
        group: Optional[list] = None,
    ) -> None:
        slots = sink[0].shape[2] + keys.shape[2]
        super().__init__(slots if seen is None else seen, group)
        self.lazy_initialization(keys, values)
        self.sink, self.store, self.slots = sink, store, slots
        self.tail = store.absorb(keys, values, self.slots)

    def update(self, key_states, value_states, *args, **kwargs):
        self.seen += key_states.shape[-2]
        self.slots += key_states.shape[-2]
        tail = (torch.cat([self.tail[0], key_states], 2), torch.cat([self.tail[1], value_states], 2))
        self.tail = self.store.absorb(*tail, self.slots)
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

    def stored(self) -> int:
        return self.slots

    def branched(self) -> "QuantizedKVLayer":
        twin = copy.copy(self)
        twin.store = self.store.branched()
        return twin

    def held_tensors(self) -> list:
        """What the layer holds: the protected tokens, the packed store and the tail."""
        return [*self.sink, *self.store.tensors(), *self.tail]


class QuantoLayer(QuantoQuantizedLayer):
    """transformers' quanto layer, whose bytes are counted from what it holds: quanto's packed
    tensors (their integers, scales and shifts) and the full-precision recent tokens."""

    def held_tensors(self) -> list:
        quantized = [getattr(self, f"_quantized_{part}", None) for part in ("keys", "values")]
        return [self.keys, self.values, *(q for q in quantized if q is not None)]
