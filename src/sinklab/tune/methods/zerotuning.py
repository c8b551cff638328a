"""ZeroTuning (Han et al., ICLR 2026, arXiv 2505.11739): a gamma per (layer, head) on the initial
token's attention weight, the rest of the row renormalised; 1 leaves a head untouched.

The search (the paper's recipe after profiling): the heads whose profile is largest in size are
rescaled, each in the direction its profile asks for (gamma = g where strengthening the initial
token helps, 1 / g where weakening it does), and the one magnitude g is chosen on validation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...core.errors import check
from ...core.hooks import hook_name
from .. import formulas
from ..edits import InitialTokenScale
from .base import Tuning, register_tuning

#: ZeroTuning's magnitudes tried on validation (gamma = g or 1 / g per head).
GAMMAS = (1.25, 1.5, 2.0, 3.0)
#: Fraction of heads ZeroTuning rescales: those with the largest profile.
ZEROTUNING_SHARE = 0.25
#: The fixed gamma each head is scaled by, alone, in ZeroTuning's ablation profile.
ABLATION_GAMMA = 1.5


@register_tuning("zerotuning")
@dataclass(frozen=True)
class ZeroTuning(Tuning):
    """A gamma per (layer, head) on the initial token's attention (rows: layers)."""

    gammas: tuple[tuple[float, ...], ...]

    help = "zerotuning (Han et al. 2026): the initial token's attention scaled per head"
    strength_label = "log gamma on the initial token"
    ablation_strength = math.log(ABLATION_GAMMA)

    def __post_init__(self) -> None:
        object.__setattr__(self, "gammas", tuple(tuple(float(g) for g in row) for row in self.gammas))
        check(len({len(row) for row in self.gammas}) <= 1, "ZeroTuning: every layer needs the same number of gammas")
        for row in self.gammas:
            InitialTokenScale(row)  # refuses a gamma that is not a positive finite number

    @classmethod
    def identity(cls, layers: int, heads: int) -> "ZeroTuning":
        return cls(tuple((1.0,) * heads for _ in range(layers)))

    @classmethod
    def untouched(cls, layers: int, heads: int) -> "ZeroTuning":
        return cls.identity(layers, heads)

    @property
    def scaled(self) -> int:
        """How many heads have a gamma other than 1."""
        return sum(g != 1.0 for row in self.gammas for g in row)

    def check_depth(self, layers: int) -> None:
        """Refuse a model of another depth than the one the gammas were chosen for."""
        check(len(self.gammas) == layers, f"this ZeroTuning has gammas for {len(self.gammas)} layers; the model has {layers}")

    def edits(self) -> list:
        return [InitialTokenScale(row, layers=(layer,)) for layer, row in enumerate(self.gammas) if any(g != 1.0 for g in row)]

    @classmethod
    def strength_hooks(cls, strength: torch.Tensor, options: dict) -> list:
        """log gamma per (layer, head), added to key 0's score (the renormalisation follows)."""
        return [(hook_name(layer, "attn.hook_scores"), _scaled(strength[layer])) for layer in range(strength.shape[0])]

    @classmethod
    def candidates(cls, profile: torch.Tensor, options: dict) -> list[tuple[str, Tuning]]:
        """One ZeroTuning per magnitude in :data:`GAMMAS` over the top :data:`ZEROTUNING_SHARE` of heads."""
        layers, heads = profile.shape
        count = max(1, round(ZEROTUNING_SHARE * layers * heads))
        flat = profile.flatten()
        chosen = [i for i in flat.abs().argsort(descending=True)[:count].tolist() if flat[i] != 0]
        out: list[tuple[str, Tuning]] = []
        for g in GAMMAS:
            gammas = [1.0] * (layers * heads)
            for i in chosen:
                gammas[i] = g if flat[i] > 0 else 1.0 / g
            rows = tuple(tuple(gammas[r * heads : (r + 1) * heads]) for r in range(layers))
            out.append((f"gamma {g:g} on {len(chosen)} heads", cls(rows)))
        return out


def _scaled(log_gamma: torch.Tensor):
    return lambda scores, where: formulas.scale_initial(scores, log_gamma)
