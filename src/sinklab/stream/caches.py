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

The per-step bookkeeping is in :mod:`.book`, the recent tokens' storage in :mod:`.strip`, the
rotary arithmetic and the taps in :mod:`.rope`, and a decode loop that checks a GPU step for host
synchronisation in :mod:`.hostsync`.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..core.errors import check
from ..models.native import KVCache
from .book import SinkBook
from .rope import RopeShift, rotate
from .strip import Strip

POLICIES = ("dense", "window", "sink", "recompute")
STRIP_SLACK = 4  # a layer's strip holds a 1/STRIP_SLACK window (at least 16 rows) more than the cache: memory bought to copy less


def check_sizes(n_sink: int, window: int) -> None:
    check(n_sink >= 0, f"the number of sink tokens must be >= 0, got {n_sink}")
    check(window >= 1, f"the window must hold at least 1 token, got {window}")
    check(window > n_sink or n_sink == 0, f"the window ({window}) must be larger than the number of sink tokens ({n_sink})")


# --------------------------------------------------------------------------- Hugging Face


def _transformers_cache_classes():
    from transformers.cache_utils import Cache, DynamicLayer

    return Cache, DynamicLayer


def make_sink_cache(model: nn.Module, n_sink: int, window: int):
    """A transformers ``Cache`` with one ``SinkCacheLayer`` per decoder layer.

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
    """
    check_sizes(n_sink, window)
    Cache, _ = _transformers_cache_classes()
    book = SinkBook(n_sink, window, RopeShift(model))
    n_layers = model.config.get_text_config(decoder=True).num_hidden_layers
    return Cache(layers=[_sink_layer_class()(book, index) for index in range(n_layers)])


def _kept_tensor(part: int, doc: str) -> property:
    """A sink cache layer's ``keys`` (part 0) or ``values`` (part 1): the sinks, then the recent
    tokens, in cache order. transformers may reset them to None; anything else is refused."""

    def read(layer) -> Optional[torch.Tensor]:
        return None if layer._sinks is None else torch.cat([layer._sinks[part], layer._strip.recent(part)], dim=-2)

    def write(layer, value) -> None:
        check(value is None, "the sink cache's keys and values are written by update() only")

    return property(read, write, doc=doc)


_SINK_LAYER = None


def _sink_layer_class():
    """Define the cache layer lazily, so importing sinklab does not import transformers."""
    global _SINK_LAYER
    if _SINK_LAYER is not None:
        return _SINK_LAYER
    _, DynamicLayer = _transformers_cache_classes()

    class SinkCacheLayer(DynamicLayer):
        """Keeps the ``n_sink`` first tokens plus the most recent ``window - 1`` between steps,
        each key where the model (or the last rebase) rotated it; the positions live in the
        cache's shared book.

        The sinks are stored apart, their keys as the model rotated them, because they are shown
        at a new position at every step once the cache is full. The recent tokens live in a
        :class:`~.strip.Strip`, which hands attention a view in cache order, so a step copies only
        the sinks and the new token, where a dense cache copies all of itself. A left-padded row
        shorter than the cache takes its sink slots from the tokens that leave the strip until its
        first real token reaches slot 0 (:meth:`SinkBook._sink_shift`)."""

        is_croppable = False

        def __init__(self, book: SinkBook, index: int) -> None:
            super().__init__()
            self.book, self.index, self.n_sink = book, index, book.n_sink
            self._sinks: Optional[tuple[torch.Tensor, torch.Tensor]] = None  # (keys, values) of the sinks
            self._strip = Strip(book.n_sink + book.window + max(book.window // STRIP_SLACK, 16))

        keys = _kept_tensor(0, "The kept keys, each rotated where ``rotated_at`` says.")
        values = _kept_tensor(1, "The kept values.")

        @property
        def positions(self) -> torch.Tensor:
            """Each kept token's index among its sequence's tokens: (kept,) for one sequence,
            (B, kept) for a batch (a left-padded row's pads are negative)."""
            return _single_row(self.book.positions)

        @property
        def rotated_at(self) -> torch.Tensor:
            """Where each kept key is rotated, as stored; shaped like ``positions``."""
            return _single_row(self.book.rotated_at)

        def lazy_initialization(self, key_states, value_states) -> None:
            self.device = key_states.device
            self._sinks = (key_states[..., :0, :], value_states[..., :0, :])
            self.is_initialized = True

        def reset(self) -> None:
            self._sinks = None
            self._strip = Strip(self._strip.capacity)
            self.is_initialized = False
            self.book.reset()

        def held_tensors(self) -> tuple[torch.Tensor, ...]:
            """Every tensor the layer holds: the sinks and the whole strip."""
            return (*(self._sinks or ()), *(self._strip.tensors or ()))

        def kept_tokens(self) -> int:
            """How many tokens the cache holds between steps (at most ``n_sink + window - 1``)."""
            return 0 if self._sinks is None else self._sinks[0].shape[-2] + self._strip.n

        def tokens_seen(self) -> int:
            """How many tokens (columns, pads included) were fed: more than ``kept_tokens`` once
            the cache has evicted (:func:`sinklab.models.hf.evicted_tokens` reads both)."""
            return self.book.seen if self.is_initialized else 0

        def get_seq_length(self) -> int:
            """In a manual loop that passes no positions, the position the next token is rotated
            at (:meth:`SinkBook.next_position`), which transformers reads to place it; when the
            caller passes positions (``generate``), the number of tokens fed, which ``generate``
            reads to skip those it passes again. ``kept_tokens`` counts the kept tokens."""
            return self.book.sequence_length() if self.is_initialized else 0

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            """The kept keys plus the new ones, numbered so that the newest kept key sits right
            before the first query (whose column is ``get_seq_length``): the kept keys are the
            columns of the attention mask just before the new tokens, which, for a left-padded row
            shorter than the cache, are its pads (hidden) and then its tokens."""
            n_kept = self.kept_tokens()
            return n_kept + query_length, self.get_seq_length() - n_kept

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            step = self.book.begin_step(key_states.shape[0], key_states.shape[-2]) if self.index == 0 else self.book.step
            check(step is not None and step.n_new == key_states.shape[-2] and step.n_old == self.kept_tokens(),
                  "the sink cache's layers must be updated in order, from layer 0, once per forward")
            sink_keys, sink_values = self._sinks
            arriving = min(self.n_sink - sink_keys.shape[-2], key_states.shape[-2])  # new tokens that are sinks
            if arriving:
                sink_keys = torch.cat([sink_keys, key_states[..., :arriving, :]], dim=-2)
                sink_values = torch.cat([sink_values, value_states[..., :arriving, :]], dim=-2)
                key_states, value_states = key_states[..., arriving:, :], value_states[..., arriving:, :]
                self._sinks = (sink_keys, sink_values)
            device = key_states.device
            shown_sinks = sink_keys if step.sink_rotation is None else rotate(sink_keys, *step.sink_rotation.on(device))
            keys, values = self._strip.step(shown_sinks, sink_values, key_states, value_states, self.n_sink)
            shown = keys
            if step.rotation is not None:  # a rebase: the recent keys are stored where they are shown, moved once
                shown = rotate(keys, *step.rotation.on(device))
                self._strip.store_keys(shown[..., sink_keys.shape[-2] :, :])
            if step.sink_shift is not None:
                self._sinks = self._shifted_sinks(step)
            self._strip.evict(step.dropped)
            return shown, values

        def _shifted_sinks(self, step) -> tuple[torch.Tensor, torch.Tensor]:
            """Each row's sink slots taken ``step.sink_shift[row]`` further along the sinks and
            the tokens about to leave the strip (as stored, like the book's ``rotated_at``)."""
            shifted = []
            for part, sinks in enumerate(self._sinks):
                run = torch.cat([sinks, self._strip.recent(part)[..., : step.dropped, :]], dim=-2)
                shifted.append(torch.stack([run[row, :, s : s + self.n_sink] for row, s in enumerate(step.sink_shift)]))
            return tuple(shifted)

        def keys_in_cache(self) -> torch.Tensor:
            """The kept keys rotated at their index in the cache (what the next query sees)."""
            rotated_at = self.book.rotated_at
            return self.book.rope.move(self.keys, rotated_at, torch.arange(rotated_at.shape[1]).expand_as(rotated_at))

        def get_max_length(self) -> int:
            return self.n_sink + self.book.window

    _SINK_LAYER = SinkCacheLayer
    return SinkCacheLayer


def _single_row(x: torch.Tensor) -> torch.Tensor:
    """A (B, kept) book tensor as the layer shows it: (kept,) for one sequence."""
    return x[0] if x.shape[0] == 1 else x


def cache_bytes(cache) -> int:
    """Bytes held by a cache's keys and values (transformers or native)."""
    if isinstance(cache, KVCache):
        tensors = list(cache.keys.values()) + list(cache.values.values())
    else:
        held = [layer.held_tensors() if hasattr(layer, "held_tensors") else (layer.keys, layer.values) for layer in cache.layers]
        tensors = [t for pair in held for t in pair if isinstance(t, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors)


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
