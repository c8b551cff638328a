"""What a cache policy is: a rule that rewrites a KV cache a prefill has just filled.

Two families share this base. A press (:mod:`.press`, one file per press under :mod:`.presses`)
evicts: each full-attention layer keeps some of the context's keys. A quantizer
(:mod:`.quantizer`, one file per quantizer under :mod:`.quantizers`) stores every key in fewer
bits. Both can hold sink tokens apart, in one vocabulary: 0 (nothing), N (the first N tokens) or
"detected" (:mod:`.sinks`), named ``keep_sinks`` on a press and ``protect`` on a quantizer (each
takes the other's name too).

Everything a policy needs from the rest of sinklab is here, once: the registry (:data:`POLICIES`,
with the families' views :data:`PRESSES` and :data:`QUANTIZERS`), what the prefill must record for
a set of policies (:func:`recording`), and the rewrite routine (:func:`rewrite`: which layers,
which sinks, where they sit among a layer's keys after a press, the report of bytes and
positions). A policy only says how one layer is rewritten (:meth:`CachePolicy.rewritten`). The
registry and the sink vocabulary are in :mod:`.registry`.

A press and then a quantizer compose: the quantizer stores what the press kept (:mod:`.block`).
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass, field, fields
from typing import Any, Callable, ClassVar, Optional

import torch

from ..core.errors import SinklabError, check
from ..stream import cache_bytes
from .registry import DETECTED, KeepSinks
from .sinks import detected_sinks


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

    def apply(self, cache, tally=None) -> "Compression":
        """Rewrite ``cache`` (just filled by a prefill) in place; see :func:`rewrite`."""
        return rewrite(cache, self, tally)

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


def sink_positions(setting: KeepSinks, length: int, tally, layers: list[int]) -> list[int]:
    """The positions a ``keep_sinks``/``protect`` setting names in a context of ``length`` tokens:
    the first N, or those detected from the prefill's attention ``tally`` (None when nothing was
    recorded) in the full-attention ``layers`` (a sliding-window layer's keys are seen by a window
    of queries, not by every later one, so its mean per query would be misread)."""
    if setting == DETECTED:
        check(
            tally is not None and bool(tally.received),
            "detected sinks are read from the prefill's attention: rewrite inside `sinklab.applied(model, ...)`, "
            "or pass the tally of a prefill run under `kvcache.tallied(...)`",
        )
        return detected_sinks({index: tally.received[index] for index in layers})
    return list(range(min(setting, length)))


def rewrite(cache, policy: CachePolicy, tally=None, sinks: Optional[list] = None) -> Compression:
    """Rewrite every full-attention layer of ``cache`` (just filled by a prefill, or by a prefill
    and a press; or grown by decoding since a press) with ``policy``, from the attention ``tally``
    when it needs it. ``sinks``: the positions held apart, when found before (a decoding press's,
    detected on the prompt); by default from the policy's setting."""
    if not isinstance(policy, CachePolicy):
        raise not_a_policy(policy)
    check(
        policy.idle or not policy.needs or tally is not None,
        f"{policy.name} scores keys from the prefill's attention: rewrite inside `sinklab.applied(model, ...)`",
    )
    layers = rewritable_layers(cache, policy)
    report = Compression(cache.layers[layers[0]].get_seq_length(), bytes_before=cache_bytes(cache))
    if sinks is None:
        sinks = [] if policy.idle else sink_positions(policy.sinks, report.length, tally, layers)
    report.sinks = list(sinks)
    group: list = []
    for index in layers:
        layer = cache.layers[index]
        context = LayerContext(
            layer.keys, layer.values, index, len(cache.layers),
            received=tally.received.get(index) if tally is not None else None,
            window=tally.window.get(index) if tally is not None else None,
            window_rows=policy.window_rows, positions=_held_positions(layer), seen=layer.get_seq_length(),
        )  # fmt: skip
        for name, sums in (("received", context.received), ("window", context.window)):
            check(
                name not in policy.needs or sums is None or sums.shape[-1] == context.length,
                f"{policy.name}: the attention tally ({name}) covers {0 if sums is None else sums.shape[-1]} keys and layer "
                f"{index} holds {context.length}: pass the tally of the prefill that filled this cache",
            )
        cache.layers[index], positions = policy.rewritten(context, report.sinks, group)
        report.positions[index] = positions.cpu()
    report.bytes_after = cache_bytes(cache)
    return report


def _held_positions(layer) -> Optional[torch.Tensor]:
    """The positions a layer's keys hold, where a press kept only some (None: every position)."""
    return layer.held_positions() if hasattr(layer, "held_positions") else None


def slots_of(context: LayerContext, sinks: list[int], name: str) -> list[int]:
    """Where the positions ``sinks`` sit among the layer's keys: the positions themselves in a dense
    layer; after a press, their place among the kept keys, which must be the same in every head (a
    policy holds one set of slots apart)."""
    if context.positions is None:
        return list(sinks)
    slots = []
    for sink in sinks:
        found = context.positions == sink  # (B, Hkv, K)
        place = found.float().argmax(-1)
        check(
            bool(found.any(-1).all()),
            f"{name} holds position {sink} apart, which the press before it did not keep in every head: "
            "give the press keep_sinks covering it",
        )
        check(
            bool((place == place.flatten()[0]).all()),
            f"{name} holds position {sink} apart, which sits at different places among the heads' kept keys (the heads "
            "kept different keys before it; a detected sink past the first tokens can): hold the first N tokens apart "
            "(keep_sinks=N) instead",
        )
        slots.append(int(place.flatten()[0]))
    return slots


def rewritable_layers(cache, policy: CachePolicy) -> list[int]:
    """The layers of ``cache`` that ``policy`` rewrites: every full-attention layer, held dense or
    as a press kept it (a quantizer stores what a press kept; a press during decoding presses its
    own layers again). Sliding-window layers are left as they are (they hold at most their window
    already); any other kind of layer is refused."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    from .layers import PressedLayer

    takes = (DynamicLayer, PressedLayer)
    chosen = []
    for index, layer in enumerate(cache.layers):
        if isinstance(layer, DynamicSlidingWindowLayer):
            continue
        if type(layer) not in takes:
            after = "a quantizer stores what a press kept, not the reverse; " if getattr(layer, "group", None) is not None else ""
            raise SinklabError(
                f"{policy.name} rewrites a dynamic cache; layer {index} of this cache is a {type(layer).__name__} "
                f"({after}use the default cache)"
            )
        chosen.append(index)
    window = getattr(cache.layers[0], "sliding_window", None)
    check(
        chosen,
        f"every layer of this model attends through a sliding window ({window} tokens), which bounds its cache "
        "already; sinklab's presses and quantizers rewrite full-attention layers only",
    )
    return chosen


def full_attention_layers(cache) -> list[int]:
    """The full-attention layers of a dense ``cache`` (sliding-window layers left out)."""
    from transformers.cache_utils import DynamicSlidingWindowLayer

    return [index for index, layer in enumerate(cache.layers) if not isinstance(layer, DynamicSlidingWindowLayer)]


def branch(cache):
    """A copy of ``cache`` that a forward may extend without changing ``cache`` (the tensors are
    shared until a forward concatenates new ones; a rewritten layer's counts, group and store are
    its own): several continuations of one compressed context."""
    twin = copy.copy(cache)
    twin.layers = [layer.branched() if hasattr(layer, "branched") else copy.copy(layer) for layer in cache.layers]
    group = [layer for layer in twin.layers if getattr(layer, "group", None) is not None]
    for layer in group:
        layer.group = group
    return twin
