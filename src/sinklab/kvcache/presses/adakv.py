"""AdaKV (Feng et al. 2024): one budget per layer, shared among its KV heads by their scores.

A press keeps the same number of keys in every head; AdaKV pools a layer's budget (the inner
press's, times the heads) and gives each head the keys that rank highest across all heads of the
layer, after a safeguard share (``alpha`` of the uniform budget) that every head keeps by its own
ranking. A head whose attention is spread gets more keys, a head that attends to a few gets fewer.
The scores are the inner press's (kvpress's ``AdaKVPress(press, alpha_safeguard=0.20)`` wraps a
scorer the same way); the sinks and the press's own window are kept in every head.

kvpress hides a head's evicted keys behind a fake key and frees nothing. Here each head holds only
its keys (:class:`~..layers.RaggedLayer`: the bytes are the budget's), and attention pads the heads
to the longest one per step and masks the padding (:mod:`..narrowed`). Batches of one only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...core.errors import check
from ..policy import CachePolicy, LayerContext
from ..press import Press
from ..rewriting import slots_of


@dataclass(frozen=True)
class AdaKV(CachePolicy):
    """AdaKV: ``press``'s scores, its budget pooled over each layer's KV heads (each head keeps at
    least ``alpha`` of the uniform budget), each head holding only its own keys. As kvpress's
    ``AdaKVPress(press, alpha_safeguard=0.2)``; the ratio and the sinks kept are the inner press's:
    ``AdaKV(SnapKV(ratio=0.5, keep_sinks=4))``."""

    press: Press = None
    alpha: float = 0.2

    kind = "press"
    aliases = {"alpha_safeguard": "alpha"}  # kvpress's name
    per_layer_budgets = True  # the heads' longest differs per layer: each layer's mask is cut to it

    def __post_init__(self) -> None:
        check(isinstance(self.press, Press), f"AdaKV wraps a press, e.g. AdaKV(SnapKV(ratio=0.5)); got {self.press!r}")
        check(0 <= self.alpha <= 1, f"alpha (the share every head keeps by its own ranking) is in [0, 1]; got {self.alpha!r}")

    @property
    def name(self) -> str:
        return f"adakv({self.press.name})"

    @property
    def ratio(self) -> float:
        return self.press.ratio

    @property
    def keep_sinks(self):
        return self.press.keep_sinks

    @property
    def needs(self) -> frozenset:
        return self.press.needs

    @property
    def window_rows(self) -> int:
        return self.press.window_rows

    @property
    def idle(self) -> bool:
        return self.press.idle

    def label(self) -> str:
        return f"AdaKV over {self.press.label()}"

    def head_budgets(self, scores: torch.Tensor, budget: int, forced: list[int]) -> list[torch.Tensor]:
        """Per KV head, the slots it keeps (ascending): ``forced`` and its best ``alpha * budget``
        by its own ranking, then the best of the layer's pooled ``heads * budget`` across heads."""
        heads, length = scores.shape[-2:]
        ranked = scores[0].float().clamp(max=torch.finfo(torch.float32).max / 4)
        if forced:
            ranked[:, forced[:budget]] = torch.finfo(torch.float32).max / 2
        floor = min(budget, max(len(forced[:budget]), int(self.alpha * budget)))
        own = ranked.topk(floor, dim=-1).indices  # (H, floor)
        chosen = torch.zeros(heads, length, dtype=torch.bool)
        chosen.scatter_(1, own.cpu(), True)
        pooled = ranked.cpu().masked_fill(chosen, float("-inf")).flatten()
        rest = pooled.topk(heads * budget - heads * floor).indices
        chosen.view(-1)[rest] = True
        return [row.nonzero().flatten() for row in chosen]

    def rewritten(self, context: LayerContext, sinks: list[int], group: list, budget=None):
        """The layer as one tensor of kept keys per KV head (:class:`~..layers.RaggedLayer`)."""
        from ..layers import RaggedLayer

        check(context.keys.shape[0] == 1, "AdaKV keeps a different number of keys per head: one sequence at a time")
        check(context.positions is None, "AdaKV presses a dense cache (not while decoding, nor after another press)")
        budget = self.press.budget(context.length, context.layer, context.n_layers) if budget is None else budget
        if budget >= context.length:
            kept = [torch.arange(context.length)] * context.keys.shape[1]
        else:
            forced = [*slots_of(context, sinks, self.name)]
            forced += [p for p in self.press.always_kept(context.length, budget) if p not in forced]
            kept = self.head_budgets(self.press.scores(context), budget, forced)
        device = context.keys.device
        keys = [context.keys[0, h, slots.to(device)] for h, slots in enumerate(kept)]  # (K_h, D) each: a new tensor
        values = [context.values[0, h, slots.to(device)] for h, slots in enumerate(kept)]
        layer = RaggedLayer(keys, values, context.seen, group, kept)
        widest = max(len(slots) for slots in kept)
        positions = torch.full((1, len(kept), widest), -1, dtype=torch.long)
        for h, slots in enumerate(kept):
            positions[0, h, : len(slots)] = slots
        return layer, positions
