"""``--suppress-sink``: a bias on the pre-normalisation scores of named keys; -inf at position 0
removes the first-token sink (:func:`suppress_sink`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from .base import Intervention, register


@register("suppress_sink", takes="switch", help="score bias -inf on position 0 in every layer")
@dataclass(frozen=True)
class ScoreBias(Intervention):
    """Add ``delta`` to the pre-normalisation scores of the keys at ``at`` (delta = -inf removes them).

    Applies to queries after each key: a token's score on itself is left alone, so removing
    position 0 never leaves query 0 with nothing to attend to.
    """

    at: tuple[int, ...]
    delta: float
    point: ClassVar[str] = "attn.hook_scores"

    @classmethod
    def for_option(cls, value, lams, where):
        return [suppress_sink(0, **where)]

    @property
    def label(self):
        at = ",".join(str(p) for p in self.at)
        return (
            "suppress_sink (score bias -inf at 0)"
            if self.delta == float("-inf") and self.at == (0,)
            else f"score_bias {self.delta:g} at {at}"
        )

    def positions(self):
        return tuple(self.at)

    def edit(self, scores, where):
        t, n_keys = scores.shape[-2], scores.shape[-1]
        queries = torch.arange(where.q_start, where.q_start + t, device=scores.device).view(-1, 1)
        keys = torch.zeros(n_keys, dtype=torch.bool, device=scores.device)
        keys[[p for p in self.at if p < n_keys]] = True
        hit = keys.view(1, -1) & (queries > torch.arange(n_keys, device=scores.device).view(1, -1))  # (t, Tk)
        return torch.where(hit, scores + self.delta, scores)


def suppress_sink(position: int = 0, **where) -> ScoreBias:
    """ScoreBias(-inf) at ``position`` in every layer: the first-token sink removed."""
    return ScoreBias(at=(position,), delta=float("-inf"), **where)
