"""Which BIG-bench tasks the accuracy judges read: the broad set measured on the default model,
the rule that keeps a task, and the suite that rule gave (BENCHMARKS.md 13).

A 135M model is at chance on many tasks, and a judge on a task at chance measures noise, so a task
enters the suite only where the model is above chance by a clear margin. :func:`screen` is the rule
(issue 50): on a selection split of at least :data:`SELECTION` examples outside the test split
(all of them where fewer), each example's rotation-averaged score is tested against the chance
level by a one-sided one-sample t-test (n in the hundreds: the mean's sampling distribution is
near normal, and a score in [0, 1] per example has no exact test that respects the rotations'
dependence), the p-values of every candidate screened corrected by Holm's step-down method
(:func:`holm`), and a task kept where its corrected test passes at :data:`ALPHA` and its accuracy is
at least :data:`MARGIN` above chance; the test split then confirms it (:func:`confirmed`). Choosing
outside the test split keeps the verdicts the test split gives unbiased.

:func:`clearly_above_chance` is the earlier rule on one order of the choices (an exact one-sided
binomial test of a 40-example validation split), under which the earlier suite (``movie_recommendation``
alone) was chosen on a split that proved a one-in-100,000 draw: superseded, kept for the records it
explains.
"""

from __future__ import annotations

import math
from typing import Sequence

from ..core.errors import check
from .paired import above_chance
from .scored import Scored

#: Single-answer multiple-choice tasks with at least 145 distinct examples (the default splits: 5
#: shots, 40 validation, 100 test), mostly short inputs.
CANDIDATES = (
    "anachronisms",
    "date_understanding",
    "disambiguation_qa",
    "entailed_polarity",
    "epistemic_reasoning",
    "fantasy_reasoning",
    "hyperbaton",
    "implicatures",
    "intent_recognition",
    "logical_fallacy_detection",
    "metaphor_boolean",
    "misconceptions",
    "movie_recommendation",
    "navigate",
    "physics",
    "presuppositions_as_nli",
    "ruin_names",
    "snarks",
    "social_iqa",
    "sports_understanding",
    "strategyqa",
    "timedial",
    "vitaminc_fact_verification",
    "winowhy",
)
#: The suite: the candidates :func:`screen` kept for the default model, zero-shot, and the test split
#: confirmed (BENCHMARKS.md 13, measured by benchmarks/suite_screen.py at commit 9870329: 5 of 24
#: kept, 4 confirmed; ``presuppositions_as_nli`` kept, not confirmed). Changing it changes what the
#: bench tasks that read it measure (bump their versions).
SUITE = ("date_understanding", "metaphor_boolean", "movie_recommendation", "vitaminc_fact_verification")
ALPHA = 0.01
MARGIN = 0.05


#: The least examples outside the test split a candidate is screened on (all of them where fewer).
SELECTION = 200
#: The most examples a candidate's accuracy is reported on (tasks with 50,000+ are never scored whole).
REPORTED = 1000


def clearly_above_chance(scored: Scored) -> bool:
    """The earlier suite rule, on one order: p < ALPHA against chance (exact binomial, one-sided) and
    MARGIN above it. Refused for scores of several orders: their strict outcomes have another chance."""
    check(scored.rotations == 1, "clearly_above_chance reads one order of the choices (rotations=1); screen() reads rotations")
    return scored.acc >= scored.chance + MARGIN and above_chance(scored.correct, scored.chance) < ALPHA


def above_chance_t(scored: Scored) -> float:
    """The one-sided p of a one-sample t-test that the mean rotation-averaged score (``score``, one
    value in [0, 1] per example) exceeds the chance level; 1.0 where every score is the same and not above."""
    from scipy import stats

    if len(set(scored.score)) == 1:
        return 0.0 if scored.score[0] > scored.chance else 1.0
    return float(stats.ttest_1samp(scored.score, scored.chance, alternative="greater").pvalue)


def interval(scored: Scored, level: float = 0.95) -> tuple[float, float]:
    """The t interval of the mean rotation-averaged accuracy (the examples a sample of the task's)."""
    from scipy import stats

    n = len(scored.score)
    mean = sum(scored.score) / n
    if n < 2:
        return (mean, mean)
    sd = math.sqrt(sum((s - mean) ** 2 for s in scored.score) / (n - 1))
    half = float(stats.t.ppf((1 + level) / 2, n - 1)) * sd / math.sqrt(n)
    return (mean - half, mean + half)


def holm(pvalues: dict[str, float], alpha: float = ALPHA) -> dict[str, bool]:
    """Holm's step-down correction (1979): the i-th smallest of m p-values passes while it is at most
    alpha / (m - i) (i from 0), and every later one fails once one does."""
    order = sorted(pvalues, key=pvalues.__getitem__)
    passed, going = {}, True
    for i, name in enumerate(order):
        going = going and pvalues[name] <= alpha / (len(order) - i)
        passed[name] = going
    return passed


def screen(selected: Sequence[Scored], alpha: float = ALPHA, margin: float = MARGIN) -> list[dict]:
    """The suite rule over every candidate screened (their selection-split scores): per task the
    accuracy with its 95 % interval, chance, the t-test's p, whether Holm's correction over all of
    them passes it, and whether the task is kept (that, and ``margin`` above chance)."""
    ps = {s.task: above_chance_t(s) for s in selected}
    passed = holm(ps, alpha)
    return [
        {
            "task": s.task,
            "n": s.n,
            "acc": s.acc,
            "acc_low": interval(s)[0],
            "acc_high": interval(s)[1],
            "chance": s.chance,
            "p": ps[s.task],
            "holm_passed": passed[s.task],
            "kept": passed[s.task] and s.acc >= s.chance + margin,
        }
        for s in selected
    ]


def confirmed(test: Scored, alpha: float = ALPHA) -> bool:
    """A kept task confirmed on its test split: above chance there by the same one-sided t-test."""
    return above_chance_t(test) < alpha
