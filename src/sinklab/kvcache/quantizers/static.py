"""Static KV quantization: symmetric INT8 or INT4 with one scale per layer and KV head for keys and
one for values, calibrated beforehand (:func:`calibrate`) and fixed, every token quantized as it
arrives. Calibrated with the sink left out and held as a full-precision cached prefix
(``protect``), the scales fit the other tokens; calibrated with it, a sink's outlying keys or
values can set them (the sink-prefix idea of ``sinklab adapt``, applied to the cache).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Optional

import torch

from ...core.errors import check
from ..packing import pack, unpack
from ..quantizer import Quantizer
from ..registry import register_policy
from ..rewriting import full_attention_layers


class StaticStore:
    """Symmetric integers with fixed per-head ranges ``key_peak``/``value_peak`` (H,, the largest
    |entry| calibrated): every token quantized as it arrives, clipped to that range."""

    def __init__(self, bits: int, key_peak: torch.Tensor, value_peak: torch.Tensor) -> None:
        self.bits, self.levels = bits, 2 ** (bits - 1) - 1
        self.scales = tuple((peak / self.levels).clamp(min=1e-8)[None, :, None, None] for peak in (key_peak, value_peak))
        self.parts: list[tuple[torch.Tensor, torch.Tensor]] = []

    def _quantized(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        q = (x.float() / scale.to(x.device)).round().clamp(-self.levels, self.levels) + self.levels
        return q.to(torch.uint8) if self.bits == 8 else pack(q, self.bits)

    def absorb(self, keys: torch.Tensor, values: torch.Tensor, end: Optional[int] = None) -> tuple[torch.Tensor, torch.Tensor]:
        if keys.shape[2]:
            self.parts.append((self._quantized(keys, self.scales[0]), self._quantized(values, self.scales[1])))
        return keys[:, :, :0], values[:, :, :0]

    @property
    def length(self) -> int:
        return sum(part[0].shape[2] for part in self.parts)

    def dequantize_into(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        if not self.parts:
            return
        for i, (out, scale) in enumerate(zip((keys, values), self.scales)):
            data = torch.cat([part[i] for part in self.parts], 2)
            q = (data if self.bits == 8 else unpack(data, self.bits)).float()
            out.copy_((q - self.levels) * scale.to(q.device))

    def tensors(self) -> list:
        return [t for part in self.parts for t in part]

    def branched(self) -> "StaticStore":
        twin = copy.copy(self)
        twin.parts = list(self.parts)
        return twin


@register_policy("static")
@dataclass(frozen=True)
class StaticKV(Quantizer):
    """Static symmetric INT8/INT4 with per-head ranges from :func:`calibrate` (``scales``: layer ->
    (key peak (H,), value peak (H,))), the first ``protect`` tokens in full precision. In
    ``sinklab compress`` it is calibrated on the corpus, after the text it is judged on."""

    bits: int = 8
    protect: int = 0
    scales: dict = field(default_factory=dict, compare=False, repr=False)

    bit_widths = (4, 8)
    protects = "first"
    calibrates = True

    def make_store(self, layer: int, protected: list[int]) -> StaticStore:
        check(layer in self.scales, f"static KV quantization has no calibrated scales for layer {layer}: calibrate() first")
        return StaticStore(self.bits, *self.scales[layer])

    def calibrated(self, model, windows: torch.Tensor) -> "StaticKV":
        return replace(self, scales=calibrate(model, windows, self.protect))

    def label(self) -> str:
        return f"static int{self.bits} (protect {self.protect})"


@torch.no_grad()
def calibrate(model, windows: torch.Tensor, protect: int) -> dict:
    """Per full-attention layer, the (key, value) ranges (H,) of static symmetric quantization:
    each KV head's largest |entry| over the calibration ``windows`` (n, T), the positions before
    ``protect`` (held in full precision at use) left out."""
    found: dict = {}
    for window in windows:
        cache = model(window[None].to(model.device), use_cache=True, logits_to_keep=1).cache
        for index in full_attention_layers(cache):
            layer = cache.layers[index]
            k, v = layer.keys[:, :, protect:], layer.values[:, :, protect:]
            peak = (k.abs().amax(dim=(0, 2, 3)).float().cpu(), v.abs().amax(dim=(0, 2, 3)).float().cpu())
            old = found.get(index)
            found[index] = peak if old is None else (torch.maximum(old[0], peak[0]), torch.maximum(old[1], peak[1]))
    return found
