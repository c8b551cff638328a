"""What a quantizer is: a cache policy that keeps every key and stores it in fewer bits, the sink
optionally held in full precision.

``protect``: 0 (everything quantized), N (the first N tokens kept in full precision) or
"detected" (:mod:`.sinks`), as far as the quantizer takes them (:attr:`Quantizer.protects`);
``keep_sinks=``, the presses' name, is taken too. Protected tokens are held apart, before the
others: attention does not depend on the order of cached keys (their positions are already
rotated in), and every cached key stays visible to every new token.

After a press a quantizer stores what the press kept (``sinklab.applied(model, SnapKV(...),
KIVI(...))``): its tokens are the layer's kept keys in order, and a protected token must be one the
press kept, at the same place in every head (a press that keeps the same sinks does).

A new quantizer is one file in :mod:`.quantizers`: a dataclass subclass of :class:`Quantizer`
with ``@register_policy("name")``, its ``bit_widths`` and what it ``protects``, and a
:meth:`Quantizer.make_store` (how one layer's quantized tokens are held: ``absorb``, ``length``,
``dequantize_into``, ``tensors``, ``branched``; :mod:`.quantizers.kivi` is the example).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ..core.errors import check
from .policy import CachePolicy, LayerContext
from .registry import DETECTED, KeepSinks, check_sink_setting
from .rewriting import slots_of

#: What a quantizer's ``protect`` takes: its ``protects`` -> the settings, in words (``--quant`` help).
PROTECTS = {"any": "0, N or detected", "first": "0 or N (first tokens)", "none": "nothing (0)"}


@dataclass(frozen=True)
class Quantizer(CachePolicy):
    """A KV quantizer: ``bits`` per stored number (from :attr:`bit_widths`), ``protect`` the sinks
    held in full precision (0, N or "detected", as :attr:`protects` allows)."""

    bits: int = 2
    protect: KeepSinks = 0

    kind = "quantizer"
    sink_field = "protect"
    aliases = {"keep_sinks": "protect"}
    #: The bit widths it takes (``sinklab compress --bits`` runs those it takes).
    bit_widths: ClassVar[tuple[int, ...]] = ()
    #: What ``protect`` takes: "any" (0, N, detected), "first" (0 or N) or "none" (0 only).
    protects: ClassVar[str] = "any"
    #: Fields ``sinklab compress`` sets from its own settings of the same name (KIVI's group_size, residual).
    run_settings: ClassVar[tuple[str, ...]] = ()
    #: Whether it must be fitted to the model before use (:meth:`calibrated`: static scales).
    calibrates: ClassVar[bool] = False

    def __post_init__(self) -> None:
        widths = " or ".join(map(str, self.bit_widths))
        check(self.bits in self.bit_widths, f"{self.name} quantizes to {widths} bits, got {self.bits}")
        if self.protects == "none":
            check(self.protect == 0, f"{self.name} protects no sink: protect must be 0, got {self.protect!r}")
        else:
            check_sink_setting(self.protect, f"{self.name}'s protect", detected=self.protects == "any")

    @classmethod
    def run_values(cls, source) -> dict:
        """Its :attr:`run_settings` as ``source`` (a run's config, or a quantizer) holds them."""
        return {key: getattr(source, key) for key in cls.run_settings}

    @classmethod
    def check_usable(cls, head_dim: int, settings: dict) -> None:
        """Refuse in one line, before any work, what this quantizer cannot do with ``settings`` (its
        :attr:`run_settings`) on a model whose heads have ``head_dim`` channels, or on this machine
        (a missing package). Nothing by default."""

    @classmethod
    def protections(cls, settings) -> list:
        """Those of the sink ``settings`` (``--keep-sinks``) this quantizer takes."""
        takes = {"none": lambda s: s == 0, "first": lambda s: s != DETECTED}.get(cls.protects, lambda s: True)
        return [s for s in settings if takes(s)]

    # -- what a subclass defines ---------------------------------------------------------------

    def make_store(self, layer: int, protected: list[int]):
        """An empty store for ``layer``'s quantized tokens; ``protected``: the slots held apart."""
        raise NotImplementedError

    def calibrated(self, model, windows: torch.Tensor) -> "Quantizer":
        """This quantizer fitted to ``model`` on the token ``windows`` (n, T), for one that
        :attr:`calibrates` (static scales); the others are returned as they are."""
        return self

    # -- derived -------------------------------------------------------------------------------

    def rewritten(self, context: LayerContext, sinks: list[int], group: list):
        """The layer as the protected tokens in full precision, the store, and a full-precision tail
        (:class:`~.layers.QuantizedKVLayer`); it holds the positions it was given."""
        from .layers import QuantizedKVLayer

        self.check_usable(context.keys.shape[-1], self.run_values(self))
        slots = slots_of(context, sinks, self.name)
        keep = torch.ones(context.length, dtype=torch.bool, device=context.keys.device)
        keep[slots] = False
        sink = (context.keys[:, :, slots], context.values[:, :, slots])
        store = self.make_store(context.layer, slots)
        layer = QuantizedKVLayer(sink, store, context.keys[:, :, keep], context.values[:, :, keep], context.seen, group)
        return layer, context.held_positions()

    def label(self) -> str:
        return f"{self.name} {self.bits}-bit (protect {self.protect})"
