"""``--amplify``: token k's attention output pushed away from the layer's mean (Li et al. 2026),
over the strengths ``--lam`` sweeps; its control, plain scaling, is :mod:`.plain_scale`."""

from __future__ import annotations

from dataclasses import dataclass

from ...core.errors import SinklabError
from .base import _OutputEdit, register

MU_DEFINITION = "mean over positions 0..T-1 of the same layer's per-head attention output in the same sequence"


@register(
    "amplify", takes="position", help="mean-centred amplification of token k's attention output over --lam", sweeps_lam=True
)
@dataclass(frozen=True)
class VarianceAmplify(_OutputEdit):
    """Mean-centred amplification of token k's attention output: o'_k = mu + lam (o_k - mu).

    ``mu`` is :data:`MU_DEFINITION` (Li et al. 2026). It raises o_k's deviation from the typical
    output, i.e. the variance that makes position 0 a sink, by lam. ``mu`` needs every position
    from 0 in one forward: under a KV cache k must be in the prompt (mu is then over the prompt),
    and a decoding step that computes k is refused rather than edited with a one-row mean.
    """

    def edit(self, z, where):
        if where.q_start > 0 and self.k >= where.q_start:
            raise SinklabError(
                f"VarianceAmplify at position {self.k} needs the attention outputs of positions 0..T-1 (its mean mu), "
                f"but this forward computes only positions from {where.q_start} (a KV cache); amplify a position of the prompt"
            )
        return super().edit(z, where)

    def rewrite(self, o_k, z):
        mu = z.mean(dim=2)  # (B, H, D): the layer's mean head output over positions
        return mu + self.lam * (o_k - mu)
