"""H2O (Zhang et al. 2023, "Heavy-Hitter Oracle"): keep the keys that received the most
attention ("heavy hitters") and the most recent ones, half the budget each.

The score is the attention each key received, summed over every query of the prefill (the
paper's accumulated attention), averaged over the query heads of each KV head; it is summed
while the prefill runs (:mod:`~sinklab.kvcache.tally`), never as a (T, T) matrix. Departures: kvpress's
nearest press (``ObservedAttentionPress``) divides each key's sum by the number of queries that
see it and keeps no recent window; here the paper's rule is kept (the sum, and half the budget
for the recent tokens, as in its reference code's equal heavy and recent sizes). The raw sum
favours early keys, so H2O usually keeps the first token whatever ``keep_sinks`` says.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..policy import LayerContext
from ..press import Press
from ..registry import register_policy


@register_policy("h2o")
@dataclass(frozen=True)
class H2O(Press):
    """H2O: keep the keys that received the most attention over the whole prefill (summed, per KV
    head) and the most recent ones, half the budget each. It reads the prefill's attention, so it
    compresses inside ``sinklab.applied(model, H2O(ratio=0.5))``. kvpress's nearest press is
    ``ObservedAttentionPress`` (this module's docstring says how they differ); kvpress's
    ``compression_ratio`` is accepted for ``ratio``."""

    needs = frozenset({"received"})

    def scores(self, context: LayerContext) -> torch.Tensor:
        return context.per_kv_head(context.received)

    def always_kept(self, length: int, budget: int) -> range:
        return range(length - budget // 2, length)
