"""A tuning around any forward: ``with sinklab.tune.applied(model, tuning):`` edits every forward,
``generate`` or lm-eval run inside the block, and leaves nothing on the model afterwards."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

from .. import intervene
from ..core.errors import check
from ..core.hooks import HookSet
from ..models.hf import QUERY_CHUNK
from .tunings import ACT, Tuning, ZeroTuning


@contextmanager
def applied(model, tuning: Tuning) -> Iterator[Optional[HookSet]]:
    """Apply ``tuning`` (a :class:`~.tunings.ZeroTuning` or :class:`~.tunings.ACT`) to ``model``
    inside the block, through sinklab's attention hooks (:func:`sinklab.intervene.applied`, which
    checks the tuning's layers and heads against the model). ACT reads each head's whole attention
    pattern to find the input's sinks, so its forwards attend all query rows at once (memory grows
    with the square of the sequence); under a KV cache a decoding step finds them in its one row.
    A tuning that edits nothing (every gamma 1) leaves the model as it is, its own attention
    included, so its logits are the untouched model's bit for bit; the block then yields None."""
    edits, chunk = tuning_edits(model, tuning)
    if not edits:
        yield None
        return
    with intervene.applied(model, edits, query_chunk=chunk) as hooks:
        yield hooks


def tuning_edits(model, tuning: Tuning) -> tuple[list, Optional[int]]:
    """The interventions ``tuning`` puts on ``model`` (checked against its layers), and the query
    rows its forwards attend at a time (ACT: all, to see each head's whole pattern)."""
    check(isinstance(tuning, Tuning), f"expected a ZeroTuning or an ACT tuning, got {type(tuning).__name__}")
    layers = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    check(
        not isinstance(tuning, ZeroTuning) or layers is None or len(tuning.gammas) == layers,
        f"this ZeroTuning has gammas for {len(getattr(tuning, 'gammas', ()))} layers; the model has {layers}",
    )
    return list(tuning.edits()), None if isinstance(tuning, ACT) else QUERY_CHUNK
