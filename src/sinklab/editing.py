"""``with sinklab.applied(model, *edits):``: every way sinklab changes a running model, in one block.

An edit is an intervention (:mod:`sinklab.intervene`: ``MaskSelf(10)``, ``ScoreBias(...)``, ...),
a tuning (:mod:`sinklab.tune`: ``ZeroTuning``, ``ACT``), or a KV-cache policy
(:mod:`sinklab.kvcache`: a press, a quantizer, a decoding press). Forward edits and cache
policies may be given in any order; they compose in this one:

1. interventions and tunings act inside every forward the block runs, through sinklab's attention
   hooks, in the order given (each edit sees the scores the ones before it left);
2. cache policies act on the cache of each prefill once its forward returns: a press, a
   quantizer, or a press then a quantizer (it stores what the press kept; given in that order, as
   the block refuses a quantizer before a press); or a decoding press alone, every so many tokens
   while decoding.

Interventions and tunings name token positions, which a press's eviction turns into cache slots, so
they are refused beside a press (with a quantizer every token keeps its slot). On exit nothing stays
on the model: its hooks and attention implementation are the ones it had, also when the block
raises. ``with press(model):`` (kvpress's spelling) is this block with that one policy.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Any, Iterator, Optional

from . import intervene, kvcache, tune
from .core.errors import SinklabError, check
from .core.hooks import Applied
from .models.hf import QUERY_CHUNK, LoadedModel


@contextmanager
def applied(model, *edits, query_chunk: Optional[int] = QUERY_CHUNK, question=None) -> Iterator[Applied]:
    """Apply ``edits`` (interventions, tunings, presses, a quantizer, a decoding press; lists of
    them too) to ``model`` inside the block, composed as the module's docstring says.

    ``model``: a transformers causal LM or what :func:`sinklab.load_model` returns (a
    :class:`~sinklab.models.hf.LoadedModel`); for interventions alone, also a sinklab
    :class:`~sinklab.models.subjects.Subject` or a native
    :class:`~sinklab.models.native.Transformer`. With no edit, the block routes attention through
    sinklab's hooks and edits nothing, so probes can be attached to ``.hooks``.

    ``query_chunk``: the query rows a transformers model attends at a time under interventions (None:
    whole (B, H, Tq, Tk) patterns for the hooks; a tuning that reads whole patterns, as ACT does,
    sets None itself). ``question``: the token ids a prompt ends with, kept out of a press's
    compression as kvpress's pipeline keeps its ``question=`` (:mod:`sinklab.kvcache.block`).
    Interventions are checked against the model on entry (layers, heads) and on exit (positions
    reached); a setting that cannot work is refused with a one-line reason before the block runs."""
    model = model.model if isinstance(model, LoadedModel) else model
    edits = tuple(_flat(edits))
    forward, policies, chunk = sorted_edits(model, edits, query_chunk)
    check(question is None or policies, "question= is read by a press or a quantizer; this block has none")
    with ExitStack() as stack:
        hooks = stack.enter_context(intervene._hooked(model, forward, query_chunk=chunk)) if forward or not edits else None
        cache = stack.enter_context(kvcache._rewriting(model, *policies, question=question)) if policies else None
        yield Applied(hooks, cache)


def sorted_edits(model, edits: tuple, query_chunk: Optional[int] = QUERY_CHUNK) -> tuple[list, list, Optional[int]]:
    """(the forward's interventions, the cache policies, the query rows attended at a time)."""
    forward, policies, chunk = [], [], query_chunk
    for edit in _flat(edits):
        if isinstance(edit, intervene.Intervention):
            forward.append(edit)
        elif isinstance(edit, tune.Tuning):
            interventions, rows = tune.tuning_edits(model, edit)
            forward += interventions
            chunk = None if rows is None else chunk  # a method that reads whole patterns gets them
        elif isinstance(edit, kvcache.CachePolicy):
            policies.append(edit)
        else:
            raise SinklabError(
                "sinklab.applied takes interventions (sinklab.intervene), tunings (sinklab.tune) and cache policies "
                f"(sinklab.kvcache: a press such as SnapKV(ratio=0.5), a quantizer); got {type(edit).__name__} {edit!r:.40}"
            )
    evicting = [p.name for p in policies if p.evicts]
    check(
        not (forward and evicting),
        f"interventions and tunings name token positions, which {evicting[0] if evicting else ''}'s eviction turns into "
        "cache slots: apply them with a quantizer or with no cache policy",
    )
    return forward, policies, chunk


def _flat(edits) -> Iterator[Any]:
    for edit in edits:
        if isinstance(edit, (list, tuple)):
            yield from _flat(edit)
        else:
            yield edit
