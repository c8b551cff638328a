"""The layer of a Hugging Face sink cache (:class:`SinkCacheLayer`), a transformers
``DynamicLayer``: this module imports transformers, so :mod:`.caches` imports it only when it
makes a cache (``import sinklab.stream`` stays light). The design is in :mod:`.caches`."""

from __future__ import annotations

from typing import Optional

import torch
from transformers.cache_utils import DynamicLayer

from ..core.errors import check
from .book import SinkBook
from .rope import rotate
from .strip import Strip

STRIP_SLACK = 4  # a layer's strip holds a 1/STRIP_SLACK window (at least 16 rows) more than the cache: memory bought to copy less


def _kept_tensor(part: int, doc: str) -> property:
    """A sink cache layer's ``keys`` (part 0) or ``values`` (part 1): the sinks, then the recent
    tokens, in cache order. transformers may reset them to None; anything else is refused."""

    def read(layer) -> Optional[torch.Tensor]:
        return None if layer._sinks is None else torch.cat([layer._sinks[part], layer._strip.recent(part)], dim=-2)

    def write(layer, value) -> None:
        check(value is None, "the sink cache's keys and values are written by update() only")

    return property(read, write, doc=doc)


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
        check(
            step is not None and step.n_new == key_states.shape[-2] and step.n_old == self.kept_tokens(),
            "the sink cache's layers must be updated in order, from layer 0, once per forward",
        )
        sink_keys, sink_values = self._sinks
        arriving = min(self.n_sink - sink_keys.shape[-2], key_states.shape[-2])  # new tokens that are sinks
        if arriving:
            sink_keys = torch.cat([sink_keys, key_states[..., :arriving, :]], dim=-2)
            sink_values = torch.cat([sink_values, value_states[..., :arriving, :]], dim=-2)
            key_states, value_states = key_states[..., arriving:, :], value_states[..., arriving:, :]
            self._sinks = (sink_keys, sink_values)
        device = key_states.device
        rope = self.book.ropes[self.index]
        shown_sinks = sink_keys if step.sink_rotation is None else rotate(sink_keys, *step.sink_rotation.on(device, rope))
        keys, values = self._strip.step(shown_sinks, sink_values, key_states, value_states, self.n_sink)
        shown = keys
        if step.rotation is not None:  # a rebase: the recent keys are stored where they are shown, moved once
            shown = rotate(keys, *step.rotation.on(device, rope))
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
        return self.book.ropes[self.index].move(self.keys, rotated_at, torch.arange(rotated_at.shape[1]).expand_as(rotated_at))


def _single_row(x: torch.Tensor) -> torch.Tensor:
    """A (B, kept) book tensor as the layer shows it: (kept,) for one sequence."""
    return x[0] if x.shape[0] == 1 else x
