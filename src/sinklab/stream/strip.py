"""A sink cache layer's recent keys and values, in preallocated tensors (see :class:`Strip`)."""

from __future__ import annotations

from typing import Optional

import torch


class Strip:
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
