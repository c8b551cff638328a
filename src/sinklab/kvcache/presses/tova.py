"""TOVA (Oren et al. 2024, "Transformers are Multi-State RNNs"): keep the keys the context's last
query attends to most, averaged over all heads, so every head keeps the same positions.

As kvpress's ``TOVAPress``: applied once after the prefill (the paper evicts one token per
decoding step), the last token always kept; its attention is the model's own, summed while the
prefill runs (:mod:`~sinklab.kvcache.tally`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..policy import LayerContext
from ..press import Press
from ..registry import register_policy


@register_policy("tova")
@dataclass(frozen=True)
class TOVA(Press):
    """TOVA: keep the keys the context's last query attends to most, averaged over all heads (every
    head keeps the same positions), and that last token. As kvpress's ``TOVAPress(compression_ratio)``;
    ``compression_ratio`` is accepted for ``ratio``."""

    needs = frozenset({"window"})

    @property
    def window_rows(self) -> int:
        return 1

    def scores(self, context: LayerContext) -> torch.Tensor:
        last_query = context.window.mean(dim=1, keepdim=True)  # (B, 1, T): every head
        return last_query.expand(-1, context.keys.shape[1], -1)

    def always_kept(self, length: int, budget: int) -> range:
        return range(length - 1, length)
