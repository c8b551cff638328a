"""From a head profile to a tuning, judged on the validation split by lm-eval.

Each method draws its candidates from the profile (:meth:`~.methods.Tuning.candidates`: ZeroTuning
rescales the heads whose profile is largest, one magnitude per candidate; ACT calibrates the heads
where it helps most, one head count per candidate). The untouched model is always a candidate: a
search that finds nothing better returns it, and the run says so.

Supervised mode ranks candidates by validation accuracy, ties broken by the gold answer's mean
log-probability among the choices (its raw log-likelihood carries the whitespace lm-eval moves into
every continuation, whose probability an edit moves too); unsupervised mode by the mean entropy over
the choices (lower is better), no label read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..accuracy import Scored
from .methods import Tuning


@dataclass(frozen=True)
class Candidate:
    """A tuning tried on validation, how it is named in tables, and its scores."""

    label: str
    tuning: Tuning
    scored: Scored

    def key(self, mode: str) -> tuple:
        if mode == "unsupervised":
            return (-self.scored.row()["entropy"],)
        return (self.scored.acc, self.scored.row()["gold_logprob"])


def best(candidates: Sequence[Candidate], mode: str) -> Candidate:
    """The candidate with the best validation key; on a tie the first (the untouched model leads)."""
    top = candidates[0]
    for cand in candidates[1:]:
        if cand.key(mode) > top.key(mode):
            top = cand
    return top
