"""Which BIG-bench tasks the accuracy judges read: the broad set measured on the default model,
the rule that keeps a task, and the suite that rule gave (BENCHMARKS.md 13).

A 135M model is at chance on many tasks, and a judge on a task at chance measures noise, so a task
enters the suite only where the model is above chance by a clear margin: an exact one-sided
binomial test of its validation-split accuracy against the chance level at p < :data:`ALPHA`, and
at least :data:`MARGIN` above it. The rule reads the validation split so that choosing the tasks
does not bias the verdicts, which the test split gives.
"""

from __future__ import annotations

from .harness import Scored
from .paired import above_chance

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
#: The suite: the candidates the rule kept for the default model, zero-shot (BENCHMARKS.md 13,
#: measured by benchmarks/accuracy_tasks.py: 1 of 24). Changing it changes what the bench tasks that
#: read it measure (bump their versions).
SUITE = ("movie_recommendation",)
ALPHA = 0.01
MARGIN = 0.05


def clearly_above_chance(scored: Scored) -> bool:
    """The suite rule: p < ALPHA against chance (exact binomial, one-sided) and MARGIN above it."""
    return scored.acc >= scored.chance + MARGIN and above_chance(scored.correct, scored.chance) < ALPHA
