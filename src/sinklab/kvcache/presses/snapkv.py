"""SnapKV (Li et al. 2024): keep the keys the last queries of the context attend to most, and
those last queries' own keys (the observation window).

As kvpress's ``SnapKVPress``: the attention of the last ``window_size`` queries (the model's own
softmax over the whole causal row) is averaged over those queries, smoothed along the keys by an
average pool of ``kernel_size`` (zeros beyond the edges, torch's default), averaged over the
query heads of each KV head; the window's keys are always kept, inside the budget. Departure:
kvpress recomputes the window's queries from the layer's input and scales them by the head
dimension; here the weights are the model's own (its scaling, soft-capping, learned sink logits),
summed while the prefill runs (:mod:`~sinklab.kvcache.tally`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ...core.errors import check
from ..policy import LayerContext
from ..press import Press
from ..registry import register_policy


@register_policy("snapkv")
@dataclass(frozen=True)
class SnapKV(Press):
    """SnapKV: keep the keys the last ``window_size`` queries of the compressed context attend to
    most (averaged over those queries, smoothed over ``kernel_size`` neighbouring keys, per KV head)
    and the window's own keys. As kvpress's ``SnapKVPress(compression_ratio, window_size=64,
    kernel_size=5)``; ``compression_ratio`` is accepted for ``ratio``. The window is the end of
    what is compressed: a prompt that ends with its question is scored by the question's queries
    (and the question compressed with the rest); ``sinklab.applied(model, press, question=question_ids)``
    keeps the question out of the compression, as kvpress's pipeline does, and the window is then
    the context's own last queries (the question chooses no key)."""

    window_size: int = 64
    kernel_size: int = 5

    needs = frozenset({"window"})

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.window_size >= 1, f"window_size must be at least 1, got {self.window_size}")
        check(
            self.kernel_size >= 1 and self.kernel_size % 2 == 1, f"kernel_size must be odd and positive, got {self.kernel_size}"
        )

    @property
    def window_rows(self) -> int:
        return self.window_size

    def scores(self, context: LayerContext) -> torch.Tensor:
        check(
            context.length > self.window_size,
            f"{self.name}'s window ({self.window_size} queries) needs a longer context than {context.length} tokens",
        )
        observed = context.window[..., : context.length - self.window_size] / self.window_size
        batch, heads, keys = observed.shape
        pooled = F.avg_pool1d(observed.reshape(batch * heads, 1, keys), self.kernel_size, 1, self.kernel_size // 2)
        scores = context.per_kv_head(pooled.reshape(batch, heads, keys))
        return F.pad(scores, (0, self.window_size), value=float("inf"))

    def always_kept(self, length: int, budget: int) -> range:
        return range(length - self.window_size, length)
