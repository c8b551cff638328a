"""The attention a prefill's queries pay each key, reduced while it is computed.

Score-based presses need what the queries of the context attended to: H2O the attention every
key received from every query, SnapKV and TOVA that of the last queries only. The prefill runs
under sinklab's instrumentation (:func:`~sinklab.models.hf.instrument`), which attends in blocks
of query rows; each block's weights are added into per-key sums on arrival, so no (T, T) matrix
ever exists, whatever the context's length (the scanner's recorder works the same way). The
instrumentation implements each architecture's attention exactly (soft-capping, learned sink
logits, sliding windows: the weights are the model's own).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from ..core.hooks import HookPoint, HookSet, hook_name


class AttentionTally:
    """Per-layer (B, Hq, T) sums of the prefill's attention weights: over every query row
    (``received``) and over the last ``window_rows`` rows (``window``), as asked."""

    def __init__(self, length: int, received: bool, window_rows: int) -> None:
        self.length, self.window_rows = length, window_rows
        self.received: dict[int, torch.Tensor] = {}
        self.window: dict[int, torch.Tensor] = {}
        self._want_received = received

    def hooks(self) -> list:
        return [(hook_name("*", "attn.hook_pattern"), self._on_pattern)]

    def _on_pattern(self, weights: torch.Tensor, point: HookPoint) -> None:
        """A block of query rows (B, Hq, rows, keys seen so far) added into the layer's sums."""
        rows = weights.shape[2]
        if self._want_received:
            self._add(self.received, point.layer, weights.sum(2))
        first_window_row = self.length - self.window_rows
        if self.window_rows and point.q_start + rows > first_window_row:
            skip = max(0, first_window_row - point.q_start)
            self._add(self.window, point.layer, weights[:, :, skip:].sum(2))

    def _add(self, sums: dict, layer: int, block: torch.Tensor) -> None:
        if layer not in sums:
            sums[layer] = torch.zeros(*block.shape[:2], self.length, dtype=torch.float32, device=block.device)
        sums[layer][..., : block.shape[-1]] += block.float()


@contextmanager
def tallied(model, length: int, received: bool, window_rows: int) -> Iterator[AttentionTally]:
    """Within the block, the model's forward passes (one prefill of ``length`` tokens) fill an
    :class:`AttentionTally`; the model is left as it was on exit."""
    from ..models.hf import instrument

    tally = AttentionTally(length, received, window_rows)
    hooks = HookSet()
    with hooks.attached(tally.hooks()), instrument(model, hooks):
        yield tally
