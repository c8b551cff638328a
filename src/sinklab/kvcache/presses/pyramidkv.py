"""PyramidKV (Cai et al. 2024): SnapKV's scores with budgets that shrink with depth, lower
layers keeping more of the context than upper ones, the total about SnapKV's.

The per-layer budget is kvpress's ``PyramidKVPress`` formula: with ``M = window + T (1 - ratio)``,
layer 0 keeps ``max = 2 (M - window) - min`` and the last layer ``min = (M - window) / beta``,
linearly in between; where that pyramid does not fit (``T >= max >= min >= window`` fails) the
budget falls back to SnapKV's uniform one. With kvpress's defaults (window 64, beta 20) that
fallback happens at ratios 0.75 and above, where PyramidKV is SnapKV: a compression's ``kept``
(keys per layer) shows which.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core.errors import check
from ..registry import register_policy
from .snapkv import SnapKV


@register_policy("pyramidkv")
@dataclass(frozen=True)
class PyramidKV(SnapKV):
    """PyramidKV: SnapKV's scores with per-layer budgets that shrink with depth (layer 0 keeps the
    most, the last layer about 1/``beta`` of the mean), the total about SnapKV's; where the pyramid
    does not fit, SnapKV's uniform budget. As kvpress's ``PyramidKVPress(compression_ratio,
    window_size=64, kernel_size=5, beta=20)``; ``compression_ratio`` is accepted for ``ratio``.
    Layers keep different numbers of keys, which needs the sdpa attention."""

    beta: int = 20

    per_layer_budgets = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.beta >= 1, f"beta must be at least 1, got {self.beta}")

    def pyramid(self, length: int) -> tuple[float, float] | None:
        """(layer 0's budget, the last layer's), or None where the pyramid falls back to uniform."""
        selected = length * (1 - self.ratio)
        low = selected / self.beta
        high = 2 * selected - low
        if high >= length - self.window_size:
            high = length - self.window_size
            low = 2 * selected - high
        fits = length >= high >= low >= self.window_size
        return (high, low) if fits else None

    def budget(self, length: int, layer: int, n_layers: int) -> int:
        shape = self.pyramid(length)
        if shape is None or n_layers == 1:
            return super().budget(length, layer, n_layers)
        high, low = shape
        return max(1, round(high - layer * (high - low) / (n_layers - 1)))
