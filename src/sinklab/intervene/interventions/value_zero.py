"""``--value-zero``: the value vectors of named positions zeroed (the "no-op sink" account)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import Intervention, register


@register("value_zero", takes="positions", help="zero the value vectors at these positions")
@dataclass(frozen=True)
class ValueZero(Intervention):
    """Zero the value vectors of the given positions (tests the "no-op sink" account: a sink
    whose value is already near zero loses nothing)."""

    at: tuple[int, ...]
    point: ClassVar[str] = "attn.hook_v"

    @classmethod
    def for_option(cls, value, lams, where):
        return [cls(at=tuple(value), **where)]

    @property
    def label(self):
        return f"value_zero {list(self.at)}"

    def positions(self):
        return tuple(self.at)

    def edit(self, v, where):
        edited = v.clone()
        edited[:, :, [p for p in self.at if p < v.shape[2]]] = 0.0
        return edited
