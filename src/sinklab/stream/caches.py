"""Sink-preserving KV caches (StreamingLLM, Xiao et al. 2024) for Hugging Face and native models.

The cache keeps the first ``n_sink`` tokens (the attention sinks) and the most recent tokens, so
a model can stream far past its context length at constant memory. ``window`` counts the recent
tokens a query sees *including itself*: attention spans at most ``n_sink + window`` keys.

Positions follow StreamingLLM: a query sees every kept key at its index in the cache, so the
relative distances are those of a fresh sequence of the cached tokens. Only distances matter to
RoPE, so the frame is free. In a manual loop that passes no ``position_ids``, transformers places
the next token at ``get_seq_length()``, which the cache answers with the position right after its
newest key. The recent keys then already sit at their distance from the query and stay as the
model rotated them; only the ``n_sink`` sink keys are moved, by **one** rotation from where the
model rotated them, at each step. Every ``window`` steps the frame is rebased to the cache index
(the recent keys are moved once and stored there), so positions stay small and float32 angles
exact. Re-rotating every key by -1 at each eviction instead costs a pass over the cache per step
and compounds rounding: after ~1,000 evictions a bfloat16 key is off by tens of percent
(BENCHMARKS.md, section 5).

A caller that passes ``position_ids`` (``model.generate`` does) numbers each sequence's tokens
itself; the cache then answers ``get_seq_length()`` with the number of tokens (columns) it has
been fed, as transformers' own caches do, so that ``generate`` called again with the whole
conversation feeds only the new tokens, and so that the columns of the attention mask it keeps
growing line up with the kept keys: ``get_mask_sizes`` numbers them as the last columns before the
new tokens. The recent keys again sit where the caller rotated them; only the sinks move.

Batches: rows may be left-padded (an ``attention_mask`` of zeros then ones, as tokenizers with
``padding_side="left"`` and ``model.generate`` give them), with ``position_ids`` that count each
row's real tokens (generate's ``attention_mask.cumsum(-1) - 1``). Each row keeps its own sinks,
its first ``n_sink`` real tokens, and its recent tokens; a row shorter than the cache holds its
pads in its first slots, where the mask hides them, so every row attends exactly as it would
alone. The sinks of each row move by that row's own rotation.

No host synchronisation in a decode step: the bookkeeping is Python integers and CPU tensors
worked out from what the cache already knows (the tokens fed, the positions it proposed, each
row's last position). A step that feeds several tokens (a prefill) reads the caller's positions
and attention mask once and checks them; a single-token step checks the caller's positions only
when they are in host memory (on the CPU), and on an accelerator takes them to be what the cache
expects: its proposal when the caller passes none, else each row's previous position plus one.
The step's rotation tables are built on the CPU and copied, without waiting, once to each device
that asks (a model split across devices gets each layer's tables on that layer's device).

The cache layer is in :mod:`.sink_layer`, the per-step bookkeeping in :mod:`.book`, the recent
tokens' storage in :mod:`.strip`, the rotary arithmetic and the taps in :mod:`.rope`, and a decode
loop that checks a GPU step for host synchronisation in :mod:`.hostsync`.

The cache leaves nothing on the model: its hooks come off when it is garbage-collected, or when
the ``with`` block of :func:`sink_cache` ends.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn

from ..core.errors import check
from ..models.native import KVCache
from .book import SinkBook
from .rope import ForwardTaps, layer_shifts

POLICIES = ("dense", "window", "sink", "recompute")


def check_sizes(n_sink: int, window: int) -> None:
    check(n_sink >= 0, f"the number of sink tokens must be >= 0, got {n_sink}")
    check(window >= 1, f"the window must hold at least 1 token, got {window}")
    check(window > n_sink or n_sink == 0, f"the window ({window}) must be larger than the number of sink tokens ({n_sink})")


# --------------------------------------------------------------------------- Hugging Face


def make_sink_cache(model: nn.Module, n_sink: int, window: int):
    """A transformers ``Cache`` with one :class:`~.sink_layer.SinkCacheLayer` per decoder layer.

    Use it like any cache: ``model(ids, cache=c)`` in a loop, or ``model.generate(ids, cache=c)``
    (``past_key_values=c``, the argument's name before transformers renamed it, works too). To
    continue a conversation, call ``generate`` again with the same cache and the whole
    conversation so far (the previous output plus the new message): the cache feeds only the
    tokens it has not seen, as with a dense cache, even after it evicted some (a stream that a
    manual loop without positions filled counts in the cache's own frame: continue it by hand).
    A batch may be left-padded with its ``attention_mask`` (and positions counting each row's
    tokens, which ``generate`` passes); each row streams as it would alone. ``n_sink = 0`` gives
    the plain sliding window (the ``window`` policy).

    Feed single tokens for exact streaming: a chunk of n tokens attends like a prefill (each of its
    tokens sees the kept cache and the chunk's earlier tokens, up to ``n_sink + window - 1 + n``
    keys), and the cache is trimmed after it.

    The cache watches the model's forwards through hooks (:class:`~.rope.ForwardTaps`) that come
    off the model when the cache is garbage-collected; :func:`sink_cache` takes them off at the
    end of a ``with`` block instead, whoever still holds the cache.
    """
    from transformers.cache_utils import Cache

    from .sink_layer import SinkCacheLayer

    check_sizes(n_sink, window)
    book = SinkBook(n_sink, window, layer_shifts(model), ForwardTaps(model))
    n_layers = model.config.get_text_config(decoder=True).num_hidden_layers
    return Cache(layers=[SinkCacheLayer(book, index) for index in range(n_layers)])


@contextmanager
def sink_cache(model: nn.Module, n_sink: int, window: int) -> Iterator:
    """:func:`make_sink_cache` for the ``with`` block: when it ends (by an exception too) the
    cache's hooks come off the model at once, even if the cache is still referenced (a notebook
    variable, a traceback), and the cache refuses further steps."""
    cache = make_sink_cache(model, n_sink, window)
    try:
        yield cache
    finally:
        cache.layers[0].book.taps.close()


def cache_bytes(cache) -> int:
    """Bytes held by a cache's keys and values (transformers or native)."""
    if isinstance(cache, KVCache):
        tensors = list(cache.keys.values()) + list(cache.values.values())
    else:
        held = [layer.held_tensors() if hasattr(layer, "held_tensors") else (layer.keys, layer.values) for layer in cache.layers]
        tensors = [t for pair in held for t in pair if isinstance(t, torch.Tensor)]
    return sum(tensor_bytes(t) for t in tensors)


def tensor_bytes(tensor: torch.Tensor) -> int:
    """Bytes of a tensor, or of the tensors inside a tensor subclass (quanto's packed data, scales
    and shifts), counted down to plain tensors."""
    if hasattr(tensor, "__tensor_flatten__"):
        names, _ = tensor.__tensor_flatten__()
        return sum(tensor_bytes(getattr(tensor, name)) for name in names)
    return tensor.numel() * tensor.element_size()


# --------------------------------------------------------------------------- native models


class NativeSinkCache(KVCache):
    """The sink policy for native :class:`~sinklab.models.native.Transformer` models.

    Native models cache keys before rotation and rotate them to their in-cache index at every
    step, so eviction needs no re-rotation at all.
    """

    keeps_every_token = False

    def __init__(self, n_sink: int, window: int) -> None:
        check_sizes(n_sink, window)
        super().__init__()
        self.n_sink, self.window = n_sink, window

    def store(self, t: torch.Tensor) -> torch.Tensor:
        """The first n_sink and the last window - 1 positions of (B, H, T, D)."""
        dropped = t.shape[2] - (self.n_sink + self.window - 1)
        return t if dropped <= 0 else torch.cat([t[:, :, : self.n_sink], t[:, :, self.n_sink + dropped :]], dim=2)
