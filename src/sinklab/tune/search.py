"""From a head profile to a tuning, judged on the validation split by lm-eval.

ZeroTuning (the paper's recipe after profiling): the heads whose profile is largest in size are
rescaled, each in the direction its profile asks for (gamma = g where strengthening the initial
token helps, 1 / g where weakening it does), and the one magnitude g is chosen on the validation
split. ACT: the heads where calibrating helps most are calibrated at the paper's beta, their count
chosen on the validation split. The untouched model is always a candidate: a search that finds
nothing better returns it, and the run says so.

Supervised mode ranks candidates by validation accuracy, ties broken by the gold answer's mean
log-likelihood; unsupervised mode by the mean entropy over the choices (lower is better), no label read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ..accuracy import Scored
from .tunings import ACT, Tuning, ZeroTuning

#: ZeroTuning's magnitudes tried on validation (gamma = g or 1 / g per head).
GAMMAS = (1.25, 1.5, 2.0, 3.0)
#: Fraction of heads ZeroTuning rescales: those with the largest profile.
ZEROTUNING_SHARE = 0.25
#: ACT's head counts tried on validation.
ACT_COUNTS = (4, 8, 16, 32)
#: The layers ACT may calibrate, of a model's n: ``official`` as GATECH-EIC/ACT's search (every layer
#: but the first two and the last), ``all``.
ACT_LAYER_RANGES = {"official": lambda n: range(2, n - 1), "all": range}


@dataclass(frozen=True)
class Candidate:
    """A tuning tried on validation, how it is named in tables, and its scores."""

    label: str
    tuning: Tuning
    scored: Scored

    def key(self, mode: str) -> tuple:
        if mode == "unsupervised":
            return (-self.scored.row()["entropy"],)
        return (self.scored.acc, self.scored.row()["gold_loglik"])


def zerotuning_candidates(profile: torch.Tensor) -> list[tuple[str, Tuning]]:
    """One ZeroTuning per magnitude in :data:`GAMMAS` over the top :data:`ZEROTUNING_SHARE` of heads."""
    layers, heads = profile.shape
    count = max(1, round(ZEROTUNING_SHARE * layers * heads))
    flat = profile.flatten()
    chosen = [i for i in flat.abs().argsort(descending=True)[:count].tolist() if flat[i] != 0]
    out = []
    for g in GAMMAS:
        gammas = [1.0] * (layers * heads)
        for i in chosen:
            gammas[i] = g if flat[i] > 0 else 1.0 / g
        out.append(
            (f"gamma {g:g} on {len(chosen)} heads", ZeroTuning([gammas[r * heads : (r + 1) * heads] for r in range(layers)]))
        )
    return out


def act_candidates(profile: torch.Tensor, layer_range: str = "official", spare: str = "first_token") -> list[tuple[str, Tuning]]:
    """ACT on the top n heads of the layers of ``layer_range`` (:data:`ACT_LAYER_RANGES`) where
    calibration helps (positive profile), n in :data:`ACT_COUNTS`, each keeping the sink ``spare`` names."""
    layers, heads = profile.shape
    allowed = ACT_LAYER_RANGES[layer_range](layers)
    flat = profile.flatten()
    helpful = [i for i in flat.argsort(descending=True).tolist() if flat[i] > 0 and i // heads in allowed]
    out = []
    for n in ACT_COUNTS:
        if n > len(helpful) and out:
            break
        picked = helpful[:n]
        if picked:
            out.append((f"ACT on {len(picked)} heads", ACT(tuple(divmod(i, heads) for i in picked), spare=spare)))
    return out


#: method -> the candidate tunings its profile gives.
SEARCHES = {"zerotuning": zerotuning_candidates, "act": act_candidates}


def best(candidates: Sequence[Candidate], mode: str) -> Candidate:
    """The candidate with the best validation key; on a tie the first (the untouched model leads)."""
    top = candidates[0]
    for cand in candidates[1:]:
        if cand.key(mode) > top.key(mode):
            top = cand
    return top
