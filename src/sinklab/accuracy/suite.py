"""Which BIG-bench tasks the accuracy judges read: the broad set measured on the default model,
the rule that keeps a task, and the suite that rule gave (BENCHMARKS.md 13).

A 135M model is at chance on many tasks, and a judge on a task at chance measures noise, so a task
enters the suite only where the model is above chance by a clear margin: an exact one-sided
binomial test of its test-split accuracy against the chance level at p < :data:`ALPHA`, and at
least :data:`MARGIN` above it.
"""

from __future__ import annotations

from .harness import Scored
from .paired import above_chance

#: Single-answer multiple-choice tasks with short inputs and enough examples for the splits.
CANDIDATES = (
    "anachronisms",
    "date_understanding",
    "disambiguation_qa",
    "emoji_movie",
    "empirical_judgments",
    "entailed_polarity",
    "fantasy_reasoning",
    "hyperbaton",
    "implicatures",
    "intent_recognition",
    "irony_identification",
    "logical_fallacy_detection",
    "metaphor_boolean",
    "misconceptions",
    "movie_recommendation",
    "navigate",
    "phrase_relatedness",
    "presuppositions_as_nli",
    "ruin_names",
    "simple_ethical_questions",
    "social_iqa",
    "sports_understanding",
    "strategyqa",
    "winowhy",
)
ALPHA = 0.01
MARGIN = 0.05


def clearly_above_chance(scored: Scored) -> bool:
    """The suite rule: p < ALPHA against chance (exact binomial, one-sided) and MARGIN above it."""
    return scored.acc >= scored.chance + MARGIN and above_chance(scored.correct, scored.chance) < ALPHA
