"""Sink-preserving KV caches (StreamingLLM, Xiao et al. 2024) for Hugging Face and native models.

The cache keeps the first ``n_sink`` tokens (the attention sinks) and the most recent tokens, so
a model can stream far past its context length at constant memory. ``window`` counts the recent
tokens a query sees *including itself*: attention spans at most ``n_sink + window`` keys.

Positions follow StreamingLLM: a query sees every kept key at its index in the cache, so the
relative distances are those of a fresh sequence of the cached tokens. Only distances matter to
RoPE, so the cache picks the frame: in a manual loop, transformers places the next token at
``get_seq_length()``, which the cache answers with the position right after its newest key. The
recent keys then already sit at their distance from the query and stay as the model rotated them;
only the ``n_sink`` sink keys are moved, by **one** rotation from where the model rotated them,
at each step. Every ``window`` steps the frame is rebased to the cache index (the recent keys are
moved once and stored there), so positions stay small and float32 angles exact. Re-rotating every
key by -1 at each eviction instead costs a pass over the cache per step and compounds rounding:
after ~1,000 evictions a bfloat16 key is off by tens of percent (BENCHMARKS.md, section 5).

The rotary arithmetic and the position tap are in :mod:`.rope`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from ..core.errors import SinklabError, check
from ..models.native import KVCache
from .rope import RopeShift, rotate

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

    Use it like any cache: ``model(ids, cache=c)`` in a loop, or ``model.generate(ids, cache=c)``,
    one sequence at a time. ``n_sink = 0`` gives the plain sliding window (the ``window`` policy).
    Feed single tokens for exact streaming: a chunk of n tokens attends like a prefill (each of its
    tokens sees the kept cache and the chunk's earlier tokens, up to ``n_sink + window - 1 + n``
    keys), and the cache is trimmed after it.
    """
    check_sizes(n_sink, window)
    Cache, _ = _transformers_cache_classes()
    book = _SinkBook(n_sink, window, RopeShift(model))
    n_layers = model.config.get_text_config(decoder=True).num_hidden_layers
    return Cache(layers=[_sink_layer_class()(book, index) for index in range(n_layers)])


class _SinkBook:
    """What every layer of one sink cache shares: which stream tokens are kept, where the model
    rotated their keys, and this step's plan (worked out once, by layer 0, for all layers)."""

    def __init__(self, n_sink: int, window: int, rope: RopeShift) -> None:
        self.n_sink, self.window, self.rope = n_sink, window, rope
        self.reset()

    def reset(self) -> None:
        self.positions = torch.zeros(0, dtype=torch.long)  # stream index of every kept token
        self.rotated_at = torch.zeros(0, dtype=torch.long)  # where its key is rotated, as stored
        self.seen = 0
        self.step: Optional[_Step] = None

    def next_position(self) -> int:
        """The position the next token is rotated at in a manual loop (the cache's
        ``get_seq_length``): right after the newest kept key, so that no recent key has to move,
        until that runs a whole window ahead of the token's index in the cache; then the index
        itself, and that step stores the recent keys moved there (a rebase). Positions stay below
        ``n_sink + 2 * window`` however long the stream, and a key is re-rotated at most once while
        it is kept: the rebase comes every ``window`` steps, and a key stays ``window - 1``."""
        n_kept = len(self.rotated_at)
        if n_kept == 0:
            return 0
        follow = int(self.rotated_at[-1]) + 1
        return follow if 0 <= follow - n_kept < self.window else n_kept

    def begin_step(self, n_new: int, device) -> "_Step":
        """Plan a forward that feeds ``n_new`` tokens: which keys must be moved to be seen at their
        cache index (usually only the sinks), and how many tokens to drop after the step."""
        n_old, proposed = len(self.rotated_at), self.next_position()
        caller = self.rope.caller_positions(n_new)
        rotated_at = torch.cat([self.rotated_at, caller])
        target = _presented_positions(caller, n_old, len(rotated_at))
        n_sink = min(self.n_sink, len(rotated_at))
        sink_rotation = rotation = None
        restore = False
        if not torch.equal(rotated_at[n_sink:], target[n_sink:]):  # a rebase, or positions the caller chose
            rotation = self._rotation(rotated_at, target, device)
            restore = int(caller[0]) == proposed
            if restore:
                rotated_at[n_sink:] = target[n_sink:]
        elif not torch.equal(rotated_at[:n_sink], target[:n_sink]):
            sink_rotation = self._rotation(rotated_at[:n_sink], target[:n_sink], device)
        positions = torch.cat([self.positions, torch.arange(self.seen, self.seen + n_new)])
        dropped = max(0, len(rotated_at) - (self.n_sink + self.window - 1))
        self.step = _Step(n_old, n_new, sink_rotation, rotation, restore, dropped)
        self.rotated_at, self.positions = _drop(rotated_at, self.n_sink, dropped), _drop(positions, self.n_sink, dropped)
        self.seen += n_new
        return self.step

    def _rotation(self, source: torch.Tensor, target: torch.Tensor, device) -> tuple[torch.Tensor, torch.Tensor]:
        return tuple(t.to(device) for t in self.rope.rotation(source, target))


@dataclass
class _Step:
    n_old: int
    n_new: int
    sink_rotation: Optional[tuple[torch.Tensor, torch.Tensor]]  # moves the sinks alone (the usual step)
    rotation: Optional[tuple[torch.Tensor, torch.Tensor]]  # moves every key (a rebase, or the caller's positions)
    restore: bool  # the rebase: the recent keys are stored where this step moves them
    dropped: int  # tokens after the sinks evicted once the step is attended


def _drop(x: torch.Tensor, n_sink: int, dropped: int, dim: int = 0) -> torch.Tensor:
    """``x`` without the ``dropped`` entries that follow the first ``n_sink`` along ``dim``."""
    if not dropped:
        return x
    return torch.cat([x.narrow(dim, 0, n_sink), x.narrow(dim, n_sink + dropped, x.shape[dim] - n_sink - dropped)], dim=dim)


class _Strip:
    """One layer's recent keys and values in preallocated tensors, in cache order.

    The recent tokens sit at rows ``[start, start + n)``. A step writes the sinks just before
    them and its new tokens just after, and hands attention a view of the whole run, so it copies
    ``n_sink`` + new rows where a concatenation copies the cache. Eviction only advances
    ``start``. When a step does not fit, the recent rows move to the front of fresh tensors of
    ``capacity`` rows (the cache plus a quarter window: once per quarter window of steps), or of a
    size that holds a longer chunk, which the next step that fits the usual size gives back."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.tensors: Optional[tuple[torch.Tensor, torch.Tensor]] = None  # (keys, values), (B, H, rows, D)
        self.start = self.n = 0

    def recent(self, part: int) -> torch.Tensor:
        return self.tensors[part][..., self.start : self.start + self.n, :]

    def step(self, sink_keys, sink_values, keys, values, n_sink: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of (sinks, recent, new) keys and values, with the sinks and the new rows written."""
        n_front, n_new = sink_keys.shape[-2], keys.shape[-2]
        self._make_room(keys, values, n_sink, n_new)
        first, end = self.start - n_front, self.start + self.n + n_new
        for tensor, sinks, new in zip(self.tensors, (sink_keys, sink_values), (keys, values)):
            tensor[..., first : self.start, :].copy_(sinks)
            tensor[..., self.start + self.n : end, :].copy_(new)
        self.n += n_new
        return tuple(tensor[..., first:end, :] for tensor in self.tensors)

    def store_keys(self, keys: torch.Tensor) -> None:
        """Replace the recent keys (a rebase stores them where it moved them)."""
        self.recent(0).copy_(keys)

    def evict(self, dropped: int) -> None:
        self.start, self.n = self.start + dropped, self.n - dropped

    def _make_room(self, keys, values, n_sink: int, n_new: int) -> None:
        rows = max(self.capacity, n_sink + self.n + n_new)
        fits = self.tensors is not None and self.start >= n_sink and self.start + self.n + n_new <= self.tensors[0].shape[-2]
        if fits and (self.tensors[0].shape[-2] == self.capacity or rows > self.capacity):
            return
        fresh = tuple(x.new_empty(*x.shape[:-2], rows, x.shape[-1]) for x in (keys, values))
        if self.n:
            for tensor, part in zip(fresh, (0, 1)):
                tensor[..., n_sink : n_sink + self.n, :].copy_(self.recent(part))
        self.tensors, self.start = fresh, n_sink


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
        :class:`_Strip`, which hands attention a view in cache order, so a step copies only the
        sinks and the new token, where a dense cache copies all of itself."""

        is_croppable = False

        def __init__(self, book: _SinkBook, index: int) -> None:
            super().__init__()
            self.book, self.index, self.n_sink = book, index, book.n_sink
            self._sinks: Optional[tuple[torch.Tensor, torch.Tensor]] = None  # (keys, values) of the sinks
            self._strip = _Strip(book.n_sink + book.window + max(book.window // STRIP_SLACK, 16))

        keys = _kept_tensor(0, "The kept keys, each rotated where ``rotated_at`` says.")
        values = _kept_tensor(1, "The kept values.")

        @property
        def positions(self) -> torch.Tensor:
            return self.book.positions

        @property
        def rotated_at(self) -> torch.Tensor:
            return self.book.rotated_at

        def lazy_initialization(self, key_states, value_states) -> None:
            self.device = key_states.device
            self._sinks = (key_states[..., :0, :], value_states[..., :0, :])
            self.is_initialized = True

        def reset(self) -> None:
            self._sinks = None
            self._strip = _Strip(self._strip.capacity)
            self.is_initialized = False
            self.book.reset()

        def held_tensors(self) -> tuple[torch.Tensor, ...]:
            """Every tensor the layer holds: the sinks and the whole strip."""
            return (*(self._sinks or ()), *(self._strip.tensors or ()))

        def kept_tokens(self) -> int:
            """How many tokens the cache holds between steps (at most ``n_sink + window - 1``)."""
            return 0 if self._sinks is None else self._sinks[0].shape[-2] + self._strip.n

        def get_seq_length(self) -> int:
            """The position the next token is rotated at (:meth:`_SinkBook.next_position`); this is
            what transformers reads to place a manual loop's tokens. ``kept_tokens`` counts tokens."""
            return self.book.next_position() if self.is_initialized else 0

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            """The kept keys plus the new ones, numbered so that the newest kept key sits right
            before the first query (whose position is ``get_seq_length``)."""
            n_kept = self.kept_tokens()
            return n_kept + query_length, self.get_seq_length() - n_kept

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            if key_states.shape[0] != 1:
                raise SinklabError(f"the sink cache streams one sequence at a time; got a batch of {key_states.shape[0]}")
            step = self.book.begin_step(key_states.shape[-2], key_states.device) if self.index == 0 else self.book.step
            check(step is not None and step.n_new == key_states.shape[-2] and step.n_old == self.kept_tokens(),
                  "the sink cache's layers must be updated in order, from layer 0, once per forward")
            sink_keys, sink_values = self._sinks
            arriving = min(self.n_sink - sink_keys.shape[-2], key_states.shape[-2])  # new tokens that are sinks
            if arriving:
                sink_keys = torch.cat([sink_keys, key_states[..., :arriving, :]], dim=-2)
                sink_values = torch.cat([sink_values, value_states[..., :arriving, :]], dim=-2)
                key_states, value_states = key_states[..., arriving:, :], value_states[..., arriving:, :]
                self._sinks = (sink_keys, sink_values)
            shown_sinks = sink_keys if step.sink_rotation is None else rotate(sink_keys, *step.sink_rotation)
            keys, values = self._strip.step(shown_sinks, sink_values, key_states, value_states, self.n_sink)
            shown = keys if step.rotation is None else rotate(keys, *step.rotation)
            if step.restore:
                self._strip.store_keys(shown[..., sink_keys.shape[-2] :, :])
            self._strip.evict(step.dropped)
            return shown, values

        def keys_in_cache(self) -> torch.Tensor:
            """The kept keys rotated at their index in the cache (what the next query sees)."""
            return self.book.rope.move(self.keys, self.rotated_at, torch.arange(len(self.rotated_at)))

        def get_max_length(self) -> int:
            return self.n_sink + self.book.window

    _SINK_LAYER = SinkCacheLayer
    return SinkCacheLayer


def _presented_positions(caller: torch.Tensor, n_old: int, n_keys: int) -> torch.Tensor:
    """Where attention must see the ``n_keys`` keys: at their index in the cache, moved by how far
    the caller's positions run ahead of the cache's (in a manual loop, by the cache's own frame,
    0 to ``window``; under ``model.generate``, which passes absolute positions, by the number of
    tokens evicted so far)."""
    offset = int(caller[0]) - n_old
    return torch.arange(offset, offset + n_keys)


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

    def __init__(self, n_sink: int, window: int) -> None:
        check_sizes(n_sink, window)
        super().__init__()
        self.n_sink, self.window = n_sink, window

    def store(self, t: torch.Tensor) -> torch.Tensor:
        """The first n_sink and the last window - 1 positions of (B, H, T, D)."""
        dropped = t.shape[2] - (self.n_sink + self.window - 1)
        return t if dropped <= 0 else torch.cat([t[:, :, : self.n_sink], t[:, :, self.n_sink + dropped :]], dim=2)
