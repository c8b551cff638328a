"""``with sinklab.applied(model, *edits):``: every way sinklab changes a running model, in one block.

An edit is an intervention (:mod:`sinklab.intervene`: ``MaskSelf(10)``, ``ScoreBias(...)``, ...),
a tuning (:mod:`sinklab.tune`: ``ZeroTuning``, ``ACT``), or a KV-cache policy
(:mod:`sinklab.kvcache`: a press, a quantizer). They compose in this order, whatever order they are
given in:

1. interventions and tunings act inside every forward the block runs, through sinklab's attention
   hooks, in the order given (each edit sees the scores the ones before it left);
2. cache policies act on the cache of each prefill once its forward returns: a press, a
   quantizer, or a press then a quantizer (it stores what the press kept); or a decoding press
   alone, every so many tokens while decoding.

Interventions and tunings name token positions, which a press's eviction turns into cache slots, so
they are refused beside a press (with a quantizer every token keeps its slot). On exit nothing stays
on the model: its hooks and attention implementation are the ones it had, also when the block
raises. The per-capability blocks (``sinklab.intervene.applied``, ``sinklab.tune.applied``,
``sinklab.kvcache.applied``) are this block with one kind of edit.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional

from . import intervene, kvcache, tune
from .core.errors import SinklabError, check
from .core.hooks import HookSet
from .models.hf import QUERY_CHUNK


@dataclass
class Applied:
    """What a :func:`applied` block yields: the hooks the model fires (None without a forward
    edit; probes can be attached to it) and the cache policies' state (None without a policy; its
    ``last`` describes the last compression)."""

    hooks: Optional[HookSet]
    cache: Optional[kvcache.Pressing]


@contextmanager
def applied(model, *edits) -> Iterator[Applied]:
    """Apply ``edits`` (interventions, tunings, presses, a quantizer; lists of them too) to
    ``model`` inside the block, composed as the module's docstring says."""
    forward, policies, chunk = sorted_edits(model, edits)
    with ExitStack() as stack:
        hooks = stack.enter_context(intervene.applied(model, forward, query_chunk=chunk)) if forward else None
        cache = stack.enter_context(kvcache.applied(model, *policies)) if policies else None
        yield Applied(hooks, cache)


def sorted_edits(model, edits: tuple) -> tuple[list, list, Optional[int]]:
    """(the forward's interventions, the cache policies, the query rows attended at a time)."""
    forward, policies, chunk = [], [], QUERY_CHUNK
    for edit in _flat(edits):
        if isinstance(edit, intervene.Intervention):
            forward.append(edit)
        elif isinstance(edit, (tune.ZeroTuning, tune.ACT)):
            interventions, rows = tune.tuning_edits(model, edit)
            forward += interventions
            chunk = None if rows is None else chunk
        elif isinstance(edit, kvcache.CachePolicy):
            policies.append(edit)
        else:
            raise SinklabError(
                "sinklab.applied takes interventions (sinklab.intervene), tunings (sinklab.tune) and cache policies "
                f"(sinklab.kvcache); got {type(edit).__name__}"
            )
    check(edits, "sinklab.applied needs at least one edit: an intervention, a tuning, a press or a quantizer")
    evicting = [p.name for p in policies if p.evicts]
    check(
        not (forward and evicting),
        f"interventions and tunings name token positions, which {evicting[0] if evicting else ''}'s eviction turns into "
        "cache slots: apply them with a quantizer or with no cache policy",
    )
    return forward, policies, chunk


def _flat(edits) -> Iterator:
    for edit in edits:
        if isinstance(edit, (list, tuple)):
            yield from _flat(edit)
        else:
            yield edit
