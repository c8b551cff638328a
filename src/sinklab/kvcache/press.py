"""What a press is: a rule that scores every cached key of a context and keeps the best.

A press (kvpress's word) compresses a context's KV cache once, after its prefill: each
full-attention layer keeps ``budget`` of the context's ``T`` keys per KV head, the ones its
:meth:`Press.scores` ranks highest, and drops the rest from the cache tensors (the bytes go, no
mask hides them). ``ratio`` is the fraction of the context removed, as in kvpress
(``compression_ratio``): the budget is ``max(1, int(T * (1 - ratio)))``.

``keep_sinks`` protects sink tokens inside that budget (the sinks come out of the budget, not on
top of it): ``0`` protects nothing (the press keeps a sink only when its score ranks it high),
``N`` the first N tokens, ``"detected"`` the tokens that received far more attention than the
others on the prompt itself (:mod:`.sinks`, which names the positions it found). Windows a press
always keeps (SnapKV's last queries, TOVA's last token) also come out of the budget, after the
sinks.

A new press is one file in :mod:`.presses`: a dataclass subclass of :class:`Press` decorated with
``@register_policy("name")`` that implements :meth:`Press.scores` from a
:class:`~.policy.LayerContext` (the layer's keys and values, and, when the press declares it
``needs`` them, the attention the prefill's queries paid each key: :mod:`.tally`).

kvpress's argument names are accepted as aliases (:data:`KVPRESS_NAMES`: ``compression_ratio`` for
``ratio`` on every press, ``n_sink`` for StreamingLLM's ``keep_sinks``), so a kvpress user's
``SnapKV(compression_ratio=0.5)`` works as written; so is ``protect``, the quantizers' name for
``keep_sinks``.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Optional

import torch

from ..core.errors import check
from .policy import CachePolicy, LayerContext
from .registry import DETECTED, KeepSinks, check_sink_setting
from .rewriting import slots_of

#: kvpress's argument names a press also takes (kvpress's name -> sinklab's); a press class may add its own.
KVPRESS_NAMES = {"compression_ratio": "ratio"}


def check_ratio(ratio: float, name: str = "ratio") -> None:
    """A press's ``ratio`` (and ``--ratio``): the fraction of the context removed, 0 (nothing: the
    full cache, kvpress's default) or in (0, 1). The one check of it, for the class and the command."""
    number = isinstance(ratio, numbers.Real) and not isinstance(ratio, bool)  # numpy's and Python's numbers
    check(
        number and 0 <= ratio < 1,
        f"{name} is the fraction of the context removed: 0 (the full cache) or in (0, 1); got {ratio!r}",
    )


@dataclass(frozen=True)
class Press(CachePolicy):
    """A compression rule: after a prefill, each full-attention layer keeps the context's keys its
    :meth:`scores` rank highest and drops the rest from the cache.

    ``ratio``: the fraction of the context's keys removed, 0 (keeps every key: the dense cache) or
    in (0, 1); kvpress's ``compression_ratio``, accepted under that name too. ``keep_sinks``: 0, N
    (the first N tokens) or "detected", protected inside the budget (``protect=``, the quantizers'
    name, is taken too). Use it with ``with sinklab.applied(model, press): model.generate(...)``,
    or ``press.apply(cache)``."""

    ratio: float = 0.0
    keep_sinks: KeepSinks = 0

    kind = "press"
    aliases = {**KVPRESS_NAMES, "protect": "keep_sinks"}

    def __post_init__(self) -> None:
        check_ratio(self.ratio)
        check_sink_setting(self.keep_sinks, "keep_sinks")

    # -- what a subclass defines ---------------------------------------------------------------

    def scores(self, context: LayerContext) -> torch.Tensor:
        """(B, Hkv, T) float: how much each key is worth keeping (higher is kept)."""
        raise NotImplementedError

    def budget(self, length: int, layer: int, n_layers: int) -> int:
        """Keys a layer keeps per KV head out of a context of ``length`` (kvpress's
        ``compute_n_kept``; a press with per-layer budgets overrides it)."""
        return max(1, int(length * (1 - self.ratio)))

    def always_kept(self, length: int, budget: int) -> range:
        """Positions the press keeps whatever their score (its own window), inside the budget."""
        return range(0)

    # -- derived -------------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """At ratio 0 every key is kept: the prefill runs exactly as without a press."""
        return self.ratio == 0

    def keep(self, context: LayerContext, sinks: list[int], budget: Optional[int] = None) -> torch.Tensor:
        """(B, Hkv, budget) the slots this layer keeps (its keys' places, the positions in a dense
        layer), ascending: the ``sinks``' slots first, then the press's own window, then its best
        scores. ``budget``: keys kept per KV head, by default :meth:`budget`'s."""
        budget = self.budget(context.length, context.layer, context.n_layers) if budget is None else budget
        if budget >= context.length:  # nothing to drop (ratio 0): no score needed
            return torch.arange(context.length, device=context.keys.device).expand(*context.keys.shape[:2], -1)
        return kept_positions(self.scores(context), budget, sinks, self.always_kept(context.length, budget))

    def rewritten(self, context: LayerContext, sinks: list[int], group: list, budget: Optional[int] = None):
        """The layer holding only the kept keys (:class:`~.layers.PressedLayer`), at their positions;
        ``budget`` as :meth:`keep` takes it."""
        from .layers import PressedLayer

        kept = self.keep(context, slots_of(context, sinks, self.name), budget)
        positions = context.held_positions().gather(-1, kept.cpu())
        layer = PressedLayer(gathered(context.keys, kept), gathered(context.values, kept), context.seen, group, positions)
        return layer, positions

    def label(self) -> str:
        sinks = {0: "no sink kept", DETECTED: "detected sinks kept"}.get(self.keep_sinks, f"first {self.keep_sinks} kept")
        return f"{self.name} (ratio {self.ratio:g}, {sinks})"


def kept_positions(scores: torch.Tensor, budget: int, protected: list[int], windows: range) -> torch.Tensor:
    """(B, Hkv, budget) positions to keep (budget below T), ascending: the ``protected`` sinks
    first, then the press's ``windows``, then the best scores. A budget smaller than the protected
    positions keeps the earliest of them."""
    check(not torch.isnan(scores).any(), "a press scored a key NaN: its inputs hold NaN (the model's cache is broken)")
    ranked = scores.float().clamp(max=torch.finfo(torch.float32).max / 2)  # a copy, below the forced
    forced = [*protected, *(p for p in windows if p not in protected)][:budget]
    if forced:  # at most ``budget`` of them, all above every score: all kept
        ranked[..., forced] = torch.finfo(ranked.dtype).max
    return ranked.topk(budget, dim=-1).indices.sort(dim=-1).values


def gathered(states: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """(B, Hkv, T, D) states at (B, Hkv, K) positions -> (B, Hkv, K, D), a new contiguous tensor
    (the dropped positions' memory is freed with the old one)."""
    return states.gather(2, positions[..., None].expand(*positions.shape, states.shape[-1])).contiguous()
