"""Named hook points shared by the native models and Hugging Face models.

Every model sinklab runs fires the same names, so a probe or an intervention written once works on
both. Names follow ``blocks.{layer}.{point}`` (the TransformerLens names) with these points:

========================  =====================================================  ===================
point                     tensor                                                  shape
========================  =====================================================  ===================
``hook_resid_pre``        residual stream entering the block                      (B, T, d)
``attn.hook_q``           queries as attended (after RoPE)                        (B, H, Tq, D)
``attn.hook_k``           keys as attended to (after RoPE, KV heads repeated)     (B, H, Tk, D)
``attn.hook_v``           values as attended to                                   (B, H, Tk, D)
``attn.hook_mask``        which keys each query may see (True = visible)          (B|1, H|1, Tq, Tk)
``attn.hook_scores``      pre-normalisation scores (after scaling)                (B, H, Tq, Tk)
``attn.hook_pattern``     attention weights after the normalisation               (B, H, Tq, Tk)
``attn.hook_z``           per-head output after value aggregation, before the     (B, H, Tq, D)
                          output projection
``mlp.hook_post``         FFN intermediate activation (input of the down proj)    (B, T, I)
``hook_resid_post``       residual stream after the block                         (B, T, d)
========================  =====================================================  ===================

``attn.hook_attn_scores`` (TransformerLens's spelling) is an alias of ``attn.hook_scores``: a
pattern that spells the alias in full is attached to ``attn.hook_scores``, and its hook sees
``HookSite.point == "attn.hook_scores"`` (globs match the point names of the table only).

With a KV cache the queries are the last Tq of the Tk positions (Tq = 1 while decoding) and
:attr:`HookSite.q_start` is the absolute position of the first query row. ``attn.hook_mask``,
``attn.hook_scores`` and ``attn.hook_pattern`` may arrive in chunks of rows (the Hugging Face
adapter attends long inputs in query blocks, 256 rows by default, to bound memory; the native
model does not chunk), again with ``q_start`` giving the first row; pass ``query_chunk=None`` to
:func:`sinklab.models.hf.instrument` (or :func:`sinklab.applied`) to receive the whole
(B, H, Tq, Tk) pattern in one call. A chunk's ``hook_scores`` and ``hook_pattern`` may also stop
before the last key: keys no row of the chunk can see are not scored (their weight is zero).
Column j is always key j, and :attr:`HookSite.n_keys`, where set, is the number of keys of the
whole attention. ``attn.hook_q`` and ``attn.hook_z`` arrive whole, with ``q_start`` set.

Hooks are global state for the model that owns the :class:`HookSet`, so they are only added with
:meth:`HookSet.attached`, which removes them in ``finally`` even when the body raises.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Callable, Iterable, Iterator, Optional

import torch

POINTS = (
    "hook_resid_pre",
    "attn.hook_q",
    "attn.hook_k",
    "attn.hook_v",
    "attn.hook_mask",
    "attn.hook_scores",
    "attn.hook_pattern",
    "attn.hook_z",
    "mlp.hook_post",
    "hook_resid_post",
)
#: The points only the eager attention (:func:`~sinklab.core.attention.attend`) fires.
ATTENTION_POINTS = tuple(point for point in POINTS if point.startswith("attn."))

#: Other spellings of a point (alias -> the point of :data:`POINTS` that fires).
ALIASES = {"attn.hook_attn_scores": "attn.hook_scores"}


def hook_name(layer: int | str, point: str) -> str:
    """The stable name of ``point`` in block ``layer`` (``"*"``: a pattern for every block)."""
    return f"blocks.{layer}.{point}"


@dataclass(frozen=True)
class HookSite:
    """Where a hook fired: its full name, the block index, the first query position, (for the
    attention points, where known) the number of keys of the whole attention, and where the input
    is a prompt followed by an answer being scored (a multiple-choice judge's request), the
    prompt's length (:func:`scoring_after`; None otherwise)."""

    name: str
    layer: int
    point: str
    q_start: int = 0
    n_keys: Optional[int] = None
    prompt_end: Optional[int] = None


#: The prompt's length in the input being run, where its later positions are an answer being scored.
_PROMPT_END: ContextVar[Optional[int]] = ContextVar("sinklab_prompt_end", default=None)
#: ``prompt_end`` of an input that is a prompt and an answer being scored where the prompt's end is not
#: known (lm-eval batched several requests, or cut one to the model's positions): an edit that reads
#: the prompt's rows must refuse it rather than read every row.
PROMPT_UNKNOWN = -1


@contextmanager
def scoring_after(prompt_end: Optional[int]) -> Iterator[None]:
    """Inside the block, the inputs run are a prompt of ``prompt_end`` tokens followed by an answer
    being scored, and every :class:`HookSite` says so: an edit that reads the input's attention
    (ACT's sink detection) can read the prompt's rows only, so that each choice of a question is
    edited alike (None: no such split)."""
    token = _PROMPT_END.set(prompt_end)
    try:
        yield
    finally:
        _PROMPT_END.reset(token)


HookFn = Callable[[torch.Tensor, HookSite], Optional[torch.Tensor]]


class HookSet:
    """Hooks keyed by glob patterns over hook names (``blocks.*.attn.hook_pattern``).

    A hook receives ``(tensor, HookSite)`` and returns a replacement tensor or ``None`` to keep
    the tensor. Firing with no hooks attached costs one truthiness check.
    """

    def __init__(self) -> None:
        self._hooks: list[tuple[str, HookFn]] = []

    def __bool__(self) -> bool:
        return bool(self._hooks)

    def listens(self, layer: int, point: str) -> bool:
        """Whether any hook would receive ``point`` of ``layer`` (lets callers skip work)."""
        if not self._hooks:
            return False
        name = hook_name(layer, point)
        return any(fnmatchcase(name, pattern) for pattern, _ in self._hooks)

    def fire(self, layer: int, point: str, tensor: torch.Tensor, q_start: int = 0, n_keys: Optional[int] = None) -> torch.Tensor:
        """Pass ``tensor`` through every hook whose pattern matches; return the final tensor."""
        if not self._hooks:
            return tensor
        name = hook_name(layer, point)
        where = None
        for pattern, fn in self._hooks:
            if fnmatchcase(name, pattern):
                where = where or HookSite(name, layer, point, q_start, n_keys, _PROMPT_END.get())
                out = fn(tensor, where)
                if isinstance(out, torch.Tensor):
                    tensor = out
                elif out is not None:
                    raise TypeError(f"hook {fn!r} on {name} returned {type(out).__name__}; return a tensor or None")
        return tensor

    @contextmanager
    def attached(self, hooks: Iterable[tuple[str, HookFn]]) -> Iterator["HookSet"]:
        """Attach ``(pattern, fn)`` pairs for the duration of the block."""
        added = [(_resolved(pattern), fn) for pattern, fn in hooks]
        self._hooks.extend(added)
        try:
            yield self
        finally:
            for entry in added:
                self._hooks.remove(entry)


def _resolved(pattern: str) -> str:
    """``pattern`` with an alias point replaced by the point that fires; a ValueError if it names none."""
    parts = pattern.split(".", 2)
    if len(parts) == 3 and parts[0] == "blocks" and parts[2] in ALIASES:
        return f"blocks.{parts[1]}.{ALIASES[parts[2]]}"
    if len(parts) < 3 or parts[0] != "blocks" or not any(fnmatchcase(p, parts[2]) for p in POINTS):
        raise ValueError(
            f"hook pattern {pattern!r} names no hook point; points: {', '.join(POINTS)} (alias: {', '.join(ALIASES)})"
        )
    return pattern


@dataclass
class Applied:
    """What a ``sinklab.applied`` block (and kvpress's spelling ``with press(model):``) yields: the
    hooks the model fires (None without a forward edit; probes can be attached to it) and the
    cache policies' state (a :class:`sinklab.kvcache.CacheState`, None without a policy; its
    ``last`` describes the last rewrite of the cache)."""

    hooks: Optional[HookSet]
    cache: Optional[Any]
