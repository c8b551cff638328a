"""The control: keep a random subset of the context's keys, per KV head (kvpress's
``RandomPress``). Seeded (``seed``), so a run repeats exactly; the scores are drawn in float32
(kvpress draws them in the keys' dtype, where bfloat16 ties are common)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..policy import LayerContext
from ..press import Press
from ..registry import register_policy


@register_policy("random")
@dataclass(frozen=True)
class Random(Press):
    """The control: keep a random subset of the context's keys per KV head, drawn from ``seed`` so a
    run repeats. As kvpress's ``RandomPress(compression_ratio, seed)``; ``compression_ratio`` is
    accepted for ``ratio``."""

    seed: int = 0

    def scores(self, context: LayerContext) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed * 100_003 + context.layer)
        batch, kv_heads = context.keys.shape[:2]
        return torch.rand(batch, kv_heads, context.length, generator=generator).to(context.keys.device)
