"""``--drop-first``: the first N tokens evicted from attention (StreamingLLM's window-attention
ablation, Xiao et al. 2024)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ...core.errors import check
from .base import Intervention, register


@register("drop_first", takes="count", help="evict the first N tokens from attention (StreamingLLM ablation)")
@dataclass(frozen=True)
class DropFirst(Intervention):
    """Evict the first ``n`` tokens from attention for every later query (the StreamingLLM
    window-attention ablation, Xiao et al. 2024). The first n tokens still see each other."""

    n: int
    point: ClassVar[str] = "attn.hook_mask"

    @classmethod
    def for_option(cls, value, lams, where):
        check(value >= 1, f"--drop-first must be at least 1, got {value}")
        return [cls(n=value, **where)]

    @property
    def label(self):
        return f"drop_first n={self.n}"

    @property
    def reported_position(self):
        return 0  # the sink the eviction removes

    def positions(self):
        return (self.n - 1,) if self.n > 0 else ()

    def edit(self, mask, where):
        t = mask.shape[-2]
        queries = torch.arange(where.q_start, where.q_start + t, device=mask.device).view(-1, 1)
        evicted = (queries >= self.n) & (torch.arange(mask.shape[-1], device=mask.device).view(1, -1) < self.n)
        return mask & ~evicted
