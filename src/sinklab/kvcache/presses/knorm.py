"""Knorm (Devoto et al. 2024, "A simple and effective L2 norm-based strategy for KV cache
compression"): keep the keys of lowest L2 norm, per KV head.

As kvpress's ``KnormPress``: the norm of the cached (rotated) key, which RoPE does not change,
taken in float32 (in bfloat16 most norms of a head tie). The paper's code skips contexts shorter
than 2,048 tokens and may skip layers; here every full-attention layer of every context is
compressed, as in kvpress, so that one ratio means the same for every press.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..policy import LayerContext
from ..press import Press
from ..registry import register_policy


@register_policy("knorm")
@dataclass(frozen=True)
class Knorm(Press):
    """Knorm: keep the keys of lowest L2 norm, per KV head. As kvpress's
    ``KnormPress(compression_ratio)``; ``compression_ratio`` is accepted for ``ratio``."""

    def scores(self, context: LayerContext) -> torch.Tensor:
        return -context.keys.float().norm(dim=-1)
