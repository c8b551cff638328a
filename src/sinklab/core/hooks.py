"""Named hook points shared by the native models and Hugging Face models.

Every model sinklab runs fires the same names, so a probe or an intervention written once works on
both. Names follow ``blocks.{layer}.{point}`` with these points:

========================  =====================================================  ===================
point                     tensor                                                  shape
========================  =====================================================  ===================
``attn.hook_mask``        which keys each query may see (True = visible)          (B|1, H|1, Tq, Tk)
``attn.hook_scores``      pre-normalisation scores (after scaling)                (B, H, Tq, Tk)
``attn.hook_pattern``     attention weights after the normalisation               (B, H, Tq, Tk)
``attn.hook_k``           keys as attended to (after RoPE, KV heads repeated)     (B, H, Tk, D)
``attn.hook_v``           values as attended to                                   (B, H, Tk, D)
``attn.hook_z``           per-head output after value aggregation, before the     (B, H, Tq, D)
                          output projection
``mlp.hook_post``         FFN intermediate activation (input of the down proj)    (B, T, I)
``hook_resid_post``       residual stream after the block                         (B, T, d)
========================  =====================================================  ===================

Query-indexed tensors may arrive in chunks of rows (long inputs are attended in query blocks to
bound memory); :attr:`HookPoint.q_start` gives the absolute position of the first row. A chunk's
``hook_scores`` and ``hook_pattern`` may also stop before the last key: keys no row of the chunk
can see are not scored (their weight is zero). Column j is always key j, and
:attr:`HookPoint.n_keys`, where set, is the number of keys of the whole attention.

Hooks are global state for the model that owns the :class:`HookSet`, so they are only added with
:meth:`HookSet.attached`, which removes them in ``finally`` even when the body raises.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Callable, Iterable, Iterator, Optional

import torch

POINTS = (
    "attn.hook_mask",
    "attn.hook_scores",
    "attn.hook_pattern",
    "attn.hook_k",
    "attn.hook_v",
    "attn.hook_z",
    "mlp.hook_post",
    "hook_resid_post",
)


def hook_name(layer: int | str, point: str) -> str:
    """The stable name of ``point`` in block ``layer`` (``"*"``: a pattern for every block)."""
    return f"blocks.{layer}.{point}"


@dataclass(frozen=True)
class HookPoint:
    """Where a hook fired: its full name, the block index, the first query position and (for
    the attention points, where known) the number of keys of the whole attention."""

    name: str
    layer: int
    point: str
    q_start: int = 0
    n_keys: Optional[int] = None


HookFn = Callable[[torch.Tensor, HookPoint], Optional[torch.Tensor]]


class HookSet:
    """Hooks keyed by glob patterns over hook names (``blocks.*.attn.hook_pattern``).

    A hook receives ``(tensor, HookPoint)`` and returns a replacement tensor or ``None`` to keep
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
                where = where or HookPoint(name, layer, point, q_start, n_keys)
                out = fn(tensor, where)
                if isinstance(out, torch.Tensor):
                    tensor = out
                elif out is not None:
                    raise TypeError(f"hook {fn!r} on {name} returned {type(out).__name__}; return a tensor or None")
        return tensor

    @contextmanager
    def attached(self, hooks: Iterable[tuple[str, HookFn]]) -> Iterator["HookSet"]:
        """Attach ``(pattern, fn)`` pairs for the duration of the block."""
        added = list(hooks)
        for pattern, _ in added:
            parts = pattern.split(".", 2)
            if len(parts) < 3 or parts[0] != "blocks" or not any(fnmatchcase(p, parts[2]) for p in POINTS):
                raise ValueError(f"hook pattern {pattern!r} names no hook point; points: {', '.join(POINTS)}")
        self._hooks.extend(added)
        try:
            yield self
        finally:
            for entry in added:
                self._hooks.remove(entry)
