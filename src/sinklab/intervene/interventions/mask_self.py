"""``--mask-self``: token k attends only to itself, the edit that makes a sink (Li et al. 2026)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import Intervention, register


@register("mask_self", takes="positions", help="token k attends only to itself")
@dataclass(frozen=True)
class MaskSelf(Intervention):
    """Token k attends only to itself: its mask row keeps only the diagonal (Li et al. 2026).

    Token 0 sees nothing but itself, so its attention output is an unaveraged value vector; doing
    the same to token k gives it position 0's high-variance output, which should make it a sink.
    """

    k: int
    point: ClassVar[str] = "attn.hook_mask"

    @classmethod
    def for_option(cls, value, lams, where):
        return [cls(k=k, **where) for k in value]

    @property
    def label(self):
        return f"mask_self k={self.k}"

    def positions(self):
        return (self.k,)

    def edit(self, mask, where):
        row = self.k - where.q_start
        if not 0 <= row < mask.shape[-2]:
            return mask
        edited = mask.clone()
        edited[..., row, :] = False
        edited[..., row, self.k] = True
        return edited
