"""Position-balanced scoring: each example asked with its listed choices in every cyclic order.

A model that prefers a listed position (SmolLM2-135M picks the first-listed choice of
``movie_recommendation`` on 56 % of its examples, where the answer is first on 30 %) scores by where
the answer happens to be listed; an edit that shifts that preference moves "accuracy" without moving
what the model knows. Asking each example under every cyclic rotation of its choices puts the answer
at every position once: the rotation-averaged accuracy (each example's share of rotations answered
right) carries no position bias, the strict accuracy (right under every rotation) is CircularEval's
(Liu et al. 2023, MMBench), and the picks by position measure the bias itself. A task whose prompt
does not list its choices (``append_choices_to_input`` false) has nothing to rotate: each example
is asked once.

Rotation multiplies the requests by the number of choices (``rotations`` caps it: that many evenly
spaced shifts); ``rotations=1`` is the single listed order, lm-eval's own run.
"""

from __future__ import annotations

from typing import Sequence

from ..core.errors import check
from .bigbench import Example

#: ``rotations`` meaning every cyclic rotation of each example's choices (the default of every judge).
EVERY = 0
#: What the ``--rotations`` flags say of the setting.
ROTATIONS_HELP = (
    "the orders each example's listed choices are asked in: 0 every cyclic rotation (position-balanced; "
    "costs about the number of choices times the time of one order), 1 the listed order alone (lm-eval's "
    "single run, carrying the model's position bias), N that many evenly spaced rotations (at most the "
    "example's choices; only an N that divides their number puts the answer at every position equally often)"
)


def check_rotations(rotations: int, flag: str = "--rotations") -> None:
    """Refuse a negative rotation count in one line."""
    check(rotations >= 0, f"{flag} must be 0 (every rotation), 1 (the listed order) or more, got {rotations}")


def shifts(example: Example, rotations: int) -> tuple[int, ...]:
    """The left shifts ``example`` is asked under: one (0) where its choices are not listed, else
    every one of its n choices' rotations (``rotations`` 0 or >= n) or ``rotations`` evenly spaced."""
    n = len(example.choices)
    if example.listing is None:
        return (0,)
    k = n if rotations == EVERY else min(rotations, n)
    return tuple(i * n // k for i in range(k))


def rotated_docs(examples: Sequence[Example], rotations: int) -> list[dict]:
    """lm-eval's docs of ``examples``, each asked under its :func:`shifts`, in example order; each
    doc names its ``example`` (index) and ``shift``, which the scores are gathered back by."""
    return [
        {**example.rotated(shift).as_doc(), "example": index, "shift": shift}
        for index, example in enumerate(examples)
        for shift in shifts(example, rotations)
    ]
