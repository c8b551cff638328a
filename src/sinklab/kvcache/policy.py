"""What a cache policy is: a rule that rewrites a KV cache a prefill has just filled.

Two families share this base. A press (:mod:`.press`, one file per press under :mod:`.presses`)
evicts: each full-attention layer keeps some of the context's keys. A quantizer
(:mod:`.quantizer`, one file per quantizer under :mod:`.quantizers`) stores every key in fewer
bits. Both can hold sink tokens apart, in one vocabulary: 0 (nothing), N (the first N tokens) or
"detected" (:mod:`.sinks`), named ``keep_sinks`` on a press and ``protect`` on a quantizer (each
takes the other's name too).

Everything a policy needs from the rest of sinklab is in this base and the rewrite routine, once:
what the prefill must record for a set of policies (:func:`recording`), what a policy rewrites one
layer from (:class:`LayerContext`) and the report of what it did (:class:`Compression`) are here; the
rewrite routine (:func:`~.rewriting.rewrite`: which layers, which sinks, where they sit among a
layer's keys after a press, the report of bytes and positions) is :mod:`.rewriting`. A policy only
says how one layer is rewritten (:meth:`CachePolicy.rewritten`). The registry (:data:`~.registry.POLICIES`,
with the families' views :data:`~.registry.PRESSES` and :data:`~.registry.QUANTIZERS`) and the sink
vocabulary are in :mod:`.registry`.

A press and then a quantizer compose: the quantizer stores what the press kept (:mod:`.block`).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field, fields
from typing import Any, Callable, ClassVar, Optional

import torch

from ..core.errors import SinklabError, check
from .registry import DETECTED, KeepSinks


class _TakesOtherNames(type):
    """Policies take other spellings of their arguments (a class's ``aliases``: kvpress's names,
    and ``keep_sinks``/``protect`` across the families): a dataclass's own ``__init__`` would
    reject ``compression_ratio=`` with a bare TypeError, so they are renamed before it runs
    (giving both spellings is one line)."""

    def __call__(cls, *args, **kwargs):
        positional = [f.name for f in fields(cls) if f.init and not f.kw_only][: len(args)]
        for theirs, ours in cls.aliases.items():
            if theirs in kwargs:
                given = ours in kwargs or ours in positional  # SnapKV(0.5, compression_ratio=0.5) too
                check(not given, f"{cls.__name__}: give {ours}= (or positionally) or {theirs}=, not both")
                kwargs[ours] = kwargs.pop(theirs)
        return super().__call__(*args, **kwargs)

    @property
    def __signature__(cls) -> inspect.Signature:
        """The dataclass's fields, as ``help()`` and tab completion show them (not ``__call__``'s)."""
        init = inspect.signature(cls.__init__)
        return init.replace(parameters=list(init.parameters.values())[1:])


@dataclass(frozen=True)
class LayerContext:
    """What a policy rewrites one layer from. ``keys``/``values``: (B, Hkv, T, D) as cached (keys
    after RoPE); ``layer``/``n_layers``: where it is; ``received``: (B, Hq, T) the attention each key
    got, summed over every query of the prefill; ``window``: (B, Hq, T) the same summed over the last
    ``window_rows`` queries only (each None unless the policy ``needs`` it); ``positions``: (B, Hkv,
    T) the token positions the layer holds, when a press before this policy kept only some (None:
    0 to T - 1); ``seen``: the tokens fed so far."""

    keys: torch.Tensor
    values: torch.Tensor
    layer: int
    n_layers: int
    received: Optional[torch.Tensor] = None
    window: Optional[torch.Tensor] = None
    window_rows: int = 0
    positions: Optional[torch.Tensor] = None
    seen: int = 0

    @property
    def length(self) -> int:
        return self.keys.shape[-2]

    def per_kv_head(self, attention: torch.Tensor) -> torch.Tensor:
        """(B, Hq, T) -> (B, Hkv, T): the mean over each KV head's group of query heads (GQA), as
        kvpress averages them (a kept key serves every query head of its group)."""
        batch, heads, length = attention.shape
        groups = heads // self.keys.shape[1]
        return attention.view(batch, heads // groups, groups, length).mean(2)

    def held_positions(self) -> torch.Tensor:
        """(B, Hkv, T) the positions of the keys the layer holds."""
        if self.positions is not None:
            return self.positions
        return torch.arange(self.length).expand(*self.keys.shape[:2], -1)


@dataclass(frozen=True)
class CachePolicy(metaclass=_TakesOtherNames):
    """A rewrite of a just-filled KV cache: a press (evicts) or a quantizer (stores fewer bits).

    A subclass says its ``kind`` ("press" or "quantizer"), which field names the sinks it holds
    apart (``sink_field``), what the prefill must record for it (``needs``), and how it rewrites one
    layer (:meth:`rewritten`); :meth:`apply` runs it on a cache and the ``with`` block
    (``sinklab.applied(model, policy)``, or kvpress's spelling ``with policy(model):``) on the next
    prefill."""

    name: ClassVar[str] = ""
    #: "press" or "quantizer": the family, which sets the registry view and the cell schema's columns.
    kind: ClassVar[str] = ""
    #: Other names of this policy's arguments (theirs -> the field).
    aliases: ClassVar[dict] = {}
    #: The field that says which sinks are held apart ("keep_sinks" or "protect").
    sink_field: ClassVar[str] = "keep_sinks"
    #: What the prefill must record for :meth:`CachePolicy.rewritten` (from :data:`NEEDS`).
    needs: ClassVar[frozenset] = frozenset()
    #: Whether layers keep different numbers of keys (the mask is then cut per layer: :mod:`.narrowed`).
    per_layer_budgets: ClassVar[bool] = False

    # -- what a subclass defines ---------------------------------------------------------------

    def rewritten(self, context: LayerContext, sinks: list[int], group: list):
        """(the layer that replaces this one, (B, Hkv, K) the positions it holds, ascending).
        ``sinks``: the positions held apart; ``group``: the list every rewritten layer of the
        cache joins (its widest layer sets the mask's width)."""
        raise NotImplementedError

    @property
    def idle(self) -> bool:
        """True when the policy leaves the cache as it is (a press at ratio 0): no sinks, no tally."""
        return False

    @property
    def evicts(self) -> bool:
        """Whether it drops keys, after which a key's slot is no longer its position (interventions,
        which name positions, are refused beside it): a press that is not idle."""
        return self.kind == "press" and not self.idle

    #: The block ``with policy(model):`` opens, set by :mod:`.block` on import (it imports the
    #: policies, so they cannot import it).
    _block: ClassVar[Callable[..., Any]]

    def __call__(self, model, question=None):
        """``with press(model):``, kvpress's spelling of ``with sinklab.applied(model, press):``
        (the same block; it yields the same :class:`~sinklab.core.hooks.Applied`)."""
        return CachePolicy._block(model, self, question)

    # -- derived -------------------------------------------------------------------------------

    @property
    def sinks(self) -> KeepSinks:
        """The sink setting, whatever the family calls it."""
        return getattr(self, self.sink_field)

    @property
    def recording(self) -> frozenset:
        """What the prefill records: the policy's needs, plus every query's attention when the
        sinks are detected from it; nothing for an idle policy (the prefill runs as without it)."""
        if self.idle:
            return frozenset()
        return self.needs | ({"received"} if self.sinks == DETECTED else frozenset())

    @property
    def window_rows(self) -> int:
        """The last queries whose attention the policy reads ("window" in :attr:`needs`)."""
        return 0

    #: The one rewrite routine :meth:`apply` runs (:func:`~.rewriting.rewrite`), set by
    #: :mod:`.rewriting` on import (it imports the policies' base, so the base cannot import it).
    _rewrite: ClassVar[Callable[..., Any]]

    def apply(self, cache, tally=None) -> "Compression":
        """Rewrite ``cache`` (just filled by a prefill) in place; see :func:`~.rewriting.rewrite`."""
        return CachePolicy._rewrite(cache, self, tally)

    def settings(self) -> dict:
        """The policy as a config records it: its family, its name and every field."""
        return {self.kind: self.name, **{f.name: getattr(self, f.name) for f in fields(self) if f.repr}}


def recording(policies) -> tuple[frozenset, int]:
    """What one prefill must record for all of ``policies`` at once: (the sums, the window's rows)."""
    policies = list(policies)
    wants = frozenset().union(*(p.recording for p in policies))
    return wants, max((p.window_rows for p in policies if "window" in p.recording), default=0)


def not_a_policy(value) -> SinklabError:
    return SinklabError(
        "expected a sinklab press or quantizer (e.g. SnapKV(ratio=0.5, keep_sinks=4) or KIVI(bits=2, protect=1)), "
        f"got {type(value).__name__}"
    )


@dataclass
class Compression:
    """What one policy (or a composition) did to one context: ``length`` (tokens seen),
    ``positions`` (per rewritten layer, the (B, Hkv, K) positions each KV head holds, ascending),
    ``sinks`` (the positions held apart), and the cache's bytes before and after (every layer's keys
    and values, sliding-window layers included, which a policy leaves as they are)."""

    length: int
    positions: dict = field(default_factory=dict)
    sinks: list = field(default_factory=list)
    bytes_before: int = 0
    bytes_after: int = 0

    @property
    def layers(self) -> list[int]:
        """The layers rewritten (the full-attention ones)."""
        return list(self.positions)

    @property
    def kept(self) -> dict[int, float]:
        """Keys each KV head kept, per rewritten layer (an int); the mean over the heads where they
        kept different numbers (AdaKV, whose positions are padded with -1)."""
        return {layer: _kept(positions) for layer, positions in self.positions.items()}

    @property
    def kept_fraction(self) -> float:
        return sum(self.kept.values()) / (len(self.kept) * self.length)


def _kept(positions: torch.Tensor):
    counts = (positions >= 0).sum(-1)
    return positions.shape[-1] if bool((counts == positions.shape[-1]).all()) else counts.float().mean().item()
