"""Paired verdicts: the same examples judged twice (untouched and edited), compared example by
example, so the verdict's uncertainty is that of the change, not of two separate accuracies.

* :func:`paired_bootstrap`: the mean per-example change with a percentile interval from resampling
  examples (Efron and Tibshirani 1993), used for the rotation-averaged accuracy (each example's share
  of the orders of its choices answered right, :mod:`.rotations`) and for the continuous measures
  that move before accuracy does (the gold answer's log-likelihood and log-probability among the choices);
* the sign-flip test (:func:`~sinklab.core.stats.sign_flip_p`) of the mean accuracy change;
* :func:`mcnemar`: the exact McNemar test on the examples whose strict correctness (right under
  every order) changed (a two-sided binomial test of the discordant pairs at p = 1/2; McNemar 1947).
"""

from __future__ import annotations

from math import comb
from typing import Sequence

import numpy as np

from ..core.errors import check
from ..core.stats import sign_flip_p

BOOTSTRAP_DRAWS = 10_000
LEVEL = 0.95


def mcnemar(before: Sequence[bool], after: Sequence[bool]) -> dict:
    """Exact two-sided McNemar test: ``gained`` examples wrong before and right after, ``lost`` the
    reverse, ``p`` the probability of a split at least this uneven if neither direction is favoured."""
    check(len(before) == len(after), f"paired outcomes differ in length ({len(before)} and {len(after)})")
    gained = sum(1 for b, a in zip(before, after) if a and not b)
    lost = sum(1 for b, a in zip(before, after) if b and not a)
    n = gained + lost
    tail = sum(comb(n, k) for k in range(min(gained, lost) + 1)) / 2**n if n else 1.0
    return {"gained": gained, "lost": lost, "p": min(1.0, 2 * tail)}


def paired_bootstrap(before: Sequence[float], after: Sequence[float], seed: int = 0) -> dict:
    """The mean of ``after - before`` over examples with its :data:`LEVEL` percentile interval
    (:data:`BOOTSTRAP_DRAWS` resamples of the examples, seeded)."""
    check(len(before) == len(after) and len(before) > 0, "paired values must be two non-empty lists of equal length")
    diff = np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)
    draws = np.random.default_rng(seed).integers(0, diff.size, size=(BOOTSTRAP_DRAWS, diff.size))
    means = diff[draws].mean(axis=1)
    low, high = np.quantile(means, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return {"mean": float(diff.mean()), "low": float(low), "high": float(high), "level": LEVEL}


def verdict(before, after, seed: int = 0) -> dict:
    """Two :class:`~.scored.Scored` runs of the same examples compared example by example: the
    change of accuracy on each example's rotation-averaged score (a fraction per example; with one
    order, 0 or 1) with its paired bootstrap interval and the sign-flip test's p
    (:func:`~sinklab.core.stats.sign_flip_p`); the exact McNemar test on the strict outcomes (right
    under every order); the paired changes of the gold answer's log-likelihood and of its
    log-probability among the choices (which a term every choice shares, such as the whitespace
    lm-eval moves before each, cannot move)."""
    check(before.n == after.n, f"a paired verdict needs the same examples ({before.n} and {after.n} scored)")
    check(
        before.rotations == after.rotations,
        f"a paired verdict needs the same orders ({before.rotations} and {after.rotations} rotations)",
    )
    return {
        "mcnemar": mcnemar(before.correct, after.correct),
        "acc_change": {
            **paired_bootstrap(before.score, after.score, seed),
            "p_sign_flip": sign_flip_p([a - b for a, b in zip(after.score, before.score)], seed),
        },
        "gold_loglik_change": paired_bootstrap(before.gold_loglik, after.gold_loglik, seed),
        "gold_logprob_change": paired_bootstrap(before.gold_logprob, after.gold_logprob, seed),
    }


def paired_columns(before: dict, after: dict, paired: dict, names: tuple[str, str]) -> dict:
    """A table row's columns for one paired verdict: the orders each example was asked in
    (``rotations``) and whether its prompt lists the choices (``listed``; no: one order, nothing to
    rotate), ``acc_<name>`` (rotation-averaged) and ``acc_strict_<name>`` of the two runs
    (``before`` and ``after``: :meth:`~.scored.Scored.row` dicts, ``names`` their suffixes), the
    paired accuracy change with its interval and tests (:func:`verdict_columns`), and the gold
    answer's log-likelihood and log-probability among the choices of each."""
    first, second = names
    return {
        "rotations": before["rotations"],
        "listed": before.get("listed"),  # None in a summary written before rows carried it
        f"acc_{first}": before["acc"],
        f"acc_{second}": after["acc"],
        f"acc_strict_{first}": before["acc_strict"],
        f"acc_strict_{second}": after["acc_strict"],
        **verdict_columns(paired),
        f"gold_loglik_{first}": before["gold_loglik"],
        f"gold_loglik_{second}": after["gold_loglik"],
        f"gold_logprob_{first}": before["gold_logprob"],
        f"gold_logprob_{second}": after["gold_logprob"],
    }


def verdict_columns(paired: dict) -> dict:
    """A :func:`verdict`'s table columns: the accuracy change with its interval and sign-flip p,
    McNemar's p on the strict outcomes, and the gold answer's log-likelihood and log-probability changes."""
    return {
        "acc_change": paired["acc_change"]["mean"],
        "acc_change_low": paired["acc_change"]["low"],
        "acc_change_high": paired["acc_change"]["high"],
        "sign_flip_p": paired["acc_change"]["p_sign_flip"],
        "mcnemar_p": paired["mcnemar"]["p"],
        "gold_loglik_change": paired["gold_loglik_change"]["mean"],
        "gold_logprob_change": paired["gold_logprob_change"]["mean"],
    }


def above_chance(correct: Sequence[bool], chance: float) -> float:
    """One-sided exact binomial p-value that an accuracy this high arises from guessing at ``chance``
    (each example's chance taken as the task's mean; the suite rule reads it)."""
    n, k = len(correct), sum(bool(c) for c in correct)
    check(n > 0 and 0 < chance < 1, "above_chance needs outcomes and a chance level in (0, 1)")
    return float(sum(comb(n, j) * chance**j * (1 - chance) ** (n - j) for j in range(k, n + 1)))
