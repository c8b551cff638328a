"""KeyDiff (Park et al. 2025, arXiv 2504.15364): keep the keys least similar to the mean key
direction, per KV head.

As kvpress's ``KeyDiffPress``: the anchor is the mean of the unit-normalised cached keys, the
score minus each key's cosine similarity to it. The paper evicts block by block while it
prefills; like kvpress's press (without its ``BlockPress`` wrapper) this scores the whole context
at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..policy import LayerContext
from ..press import Press
from ..registry import register_policy


@register_policy("keydiff")
@dataclass(frozen=True)
class KeyDiff(Press):
    """KeyDiff: keep the keys least similar (cosine) to the mean key direction, per KV head. As
    kvpress's ``KeyDiffPress(compression_ratio)``; ``compression_ratio`` is accepted for ``ratio``."""

    def scores(self, context: LayerContext) -> torch.Tensor:
        unit = F.normalize(context.keys.float(), dim=-1)
        anchor = unit.mean(dim=2, keepdim=True)
        return -F.cosine_similarity(unit, anchor, dim=-1)
