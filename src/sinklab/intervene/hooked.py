"""Interventions around any forward, the part of ``sinklab.applied`` (:mod:`sinklab.editing`) that
edits attention: whatever runs inside the block (a forward, ``model.generate``, a backward pass) on
a model the user already holds.

The run functions (:func:`~.run.apply_interventions`, ``sinklab intervene``) own their forward
and run it without gradients; the block leaves the forward, autograd and the KV cache to the
caller and only routes attention through sinklab's hook points while it runs.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional, Sequence

from torch import nn

from ..core.errors import SinklabError, check
from ..core.hooks import HookSet, HookSite, hook_name
from ..models.hf import QUERY_CHUNK, LoadedModel, evicted_tokens
from ..models.native import Transformer
from ..models.subjects import HFSubject, NativeSubject, Subject
from .experiments import hooks_of, validate_all
from .interventions import Intervention


@contextmanager
def _hooked(model, interventions: Sequence[Intervention], query_chunk: Optional[int] = QUERY_CHUNK) -> Iterator[HookSet]:
    """Apply ``interventions`` to every forward of ``model`` run inside the block.

    ``model`` is a transformers causal LM (its attention is routed through sinklab's instrumented
    attention for the block), a :class:`~sinklab.models.subjects.Subject`, or a native
    :class:`~sinklab.models.native.Transformer` language model. Layers and heads are checked
    against the model on entry; positions against the longest sequence the block ran, on exit
    (an edit at a position no forward reached did nothing, which is an error). Under a KV cache
    a position-k edit acts in the step that computes position k; a forward whose cache has
    dropped tokens (a sink or sliding-window cache) is refused, positions being cache slots there.

    Autograd is left as the caller set it (``loss.backward()`` inside the block reaches the
    parameters through the edit). ``query_chunk`` rows of a transformers model are attended at a
    time; None delivers whole (B, H, Tq, Tk) masks, scores and patterns to hooks (native models
    never chunk; a Subject keeps the ``query_chunk`` it was made with). Yields the
    :class:`HookSet` the model fires, so probes can be attached next to the edits::

        with sinklab.applied(model, MaskSelf(10), query_chunk=None) as block:
            with block.hooks.attached([("blocks.*.attn.hook_pattern", keep)]):
                model(ids)

    On exit the model's attention implementation, its torch hooks and the edits are removed, also
    when the block raises. A scan or run started inside the block uses its own hooks, without
    these edits: give the run function the interventions instead.
    """
    subject = _subject(model, query_chunk)
    edits = tuple(interventions)
    validate_all(edits, subject.n_layers, subject.n_heads, None)
    longest = 0

    def measure(mask, where: HookSite) -> None:
        nonlocal longest
        longest = max(longest, mask.shape[-1])

    guard = (
        subject.model.register_forward_pre_hook(_refuse_evicted_positions, with_kwargs=True)
        if isinstance(subject, HFSubject)
        else None
    )
    try:
        with (
            subject.session(grad=True),
            subject.hooks.attached([(hook_name(0, "attn.hook_mask"), measure), *hooks_of(edits, subject.n_heads)]),
        ):
            yield subject.hooks
    finally:
        if guard is not None:
            guard.remove()
    if longest:
        validate_all(edits, subject.n_layers, subject.n_heads, longest)


def _refuse_evicted_positions(module, args, kwargs) -> None:
    """A forward pre-hook: an edit names token positions, which the hooks can tell only while the
    cache holds every token; after a sink or sliding-window cache dropped some, position k would
    be a cache slot (a silently wrong edit), so the forward is refused."""
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    dropped = evicted_tokens(cache) if cache is not None else 0
    check(
        dropped == 0,
        f"applied() edits token positions, but this forward's cache has dropped {dropped} token(s) "
        "(a sink or sliding-window cache): positions would be cache slots. "
        "Apply the edits with a cache that keeps every token (the default DynamicCache)",
    )


def _subject(model, query_chunk: Optional[int]) -> Subject:
    """The :class:`Subject` whose session carries the edits."""
    if isinstance(model, Subject):
        own = getattr(model, "query_chunk", query_chunk)
        check(
            own == query_chunk,
            f"this {type(model).__name__} attends {own} query rows at a time (set when it was made); "
            f"pass query_chunk={own!r} or the model itself",
        )
        return model
    if isinstance(model, Transformer):
        check(
            model.cfg.vocab_size is not None,
            "applied() takes native language models; "
            "for a vector-input model attach hooks_of(interventions, n_heads) to model.hooks",
        )
        return NativeSubject(model)
    if isinstance(model, nn.Module) and hasattr(model, "set_attn_implementation"):
        return HFSubject(LoadedModel(model, None, type(model).__name__, "object"), query_chunk)  # edits need no tokenizer
    raise SinklabError(
        f"applied() takes a transformers causal LM, a sinklab Subject or a native Transformer, not {type(model).__name__}"
    )
