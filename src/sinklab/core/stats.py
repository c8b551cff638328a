"""Paired tests shared by the capabilities that compare two runs of the same units (seeds, examples)."""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

#: Up to this many non-zero differences the sign-flip test enumerates every sign pattern.
EXACT_UP_TO = 16
#: Beyond it, this many seeded random sign patterns.
SIGN_FLIP_DRAWS = 10_000


def sign_flip_p(diffs: Sequence[float], seed: int = 0) -> float:
    """The two-sided sign-flip (paired permutation) p-value of the mean of paired differences: the
    share of sign patterns whose absolute sum is at least the observed one. It assumes only that a
    difference is as likely to be negative as positive under no effect (no normality). Exact over
    every pattern of the non-zero differences (zeros change no sum) up to :data:`EXACT_UP_TO` of
    them; beyond, :data:`SIGN_FLIP_DRAWS` seeded patterns, counted with the observed one
    ((1 + hits) / (1 + draws), never 0)."""
    nonzero = np.asarray([d for d in diffs if d != 0], dtype=np.float64)
    if nonzero.size == 0:
        return 1.0
    observed = abs(nonzero.sum()) - 1e-12 * max(1.0, abs(nonzero.sum()))
    if nonzero.size <= EXACT_UP_TO:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=nonzero.size)))
        return float((np.abs(signs @ nonzero) >= observed).mean())
    signs = np.random.default_rng(seed).choice((1.0, -1.0), size=(SIGN_FLIP_DRAWS, nonzero.size))
    return float((1 + (np.abs(signs @ nonzero) >= observed).sum()) / (1 + SIGN_FLIP_DRAWS))
