"""``--scale``: token k's attention output only scaled, over the strengths ``--lam`` sweeps: the
control of ``--amplify`` (:mod:`.variance_amplify`; Li et al. 2026)."""

from __future__ import annotations

from dataclasses import dataclass

from .base import _OutputEdit, register


@register("scale", takes="position", help="plain scaling of token k's attention output over --lam (the control)", sweeps_lam=True)
@dataclass(frozen=True)
class PlainScale(_OutputEdit):
    """o'_k = lam * o_k: the control that raises the norm of token k's output but not in the
    mean-centred way (Li et al. 2026 find it does not create a sink)."""

    def rewrite(self, o_k, z):
        return self.lam * o_k
