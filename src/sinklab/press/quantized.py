"""KV quantization that can hold the sink in full precision, as a transformers-5 cache of packed
integers (:mod:`.packing`: the bytes are real).

* :class:`KIVI` (Liu et al. 2024): keys quantized per channel over groups of ``group_size``
  tokens, values per token over groups of ``group_size`` channels, asymmetric, 2 or 4 bits; the
  most recent tokens stay in full precision, ``residual`` to ``residual + group_size - 1`` of
  them, and are quantized a group at a time as newer ones arrive (KIVI's streaming rule). The
  groups and the recent window are where an unprotected cache has them (:class:`KiviStore`), so
  protected and unprotected caches are compared at the same full-precision recent tokens, the
  protected ones counted besides them: ``protect=N`` holds exactly N more tokens in full precision
  (fewer where protected tokens fall in the recent window, which holds them anyway).
* :class:`StaticKV`: symmetric INT8 or INT4 with one scale per layer and KV head for keys and one
  for values, calibrated beforehand (:func:`calibrate`) and fixed: every token is quantized as it
  arrives. Calibrated with the sink left out and held as a full-precision cached prefix
  (``protect``), the scales fit the other tokens; calibrated with it, a sink's outlying keys or
  values can set them (the sink-prefix idea of ``sinklab adapt``, applied to the cache).

``protect``: 0 (everything quantized), N (the first N tokens kept in full precision) or
"detected" (:mod:`.sinks`, KIVI only). Protected tokens are held apart, before the others:
attention does not depend on the order of cached keys (their positions are already rotated in),
and every cached key stays visible to every new token.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import ClassVar, Optional

import torch

from ..core.errors import check
from ..stream import cache_bytes
from .base import DETECTED, KeepSinks, check_sink_setting, not_a_press, sink_positions, started
from .cache import full_attention_layers
from .packing import Quantized, pack, quantize_groups, unpack


class KiviStore:
    """KIVI's quantized part of one layer: key blocks (B, H, blocks, D, G), value rows (B, H, n, D/G, G).

    Groups of ``group`` tokens sit where an unprotected cache puts them: at positions 0 to G - 1,
    G to 2G - 1, ... of the sequence (the positions counted with the protected ones). A group is
    quantized once the newest token is ``residual`` or more past its end, so after ``n`` tokens the
    positions from ``(n - residual) // G * G`` on are the full-precision recent tokens, between
    ``residual`` and ``residual + G - 1`` of them (KIVI's streaming rule), the same ones whatever
    is protected. A protected position (``protected``, held apart by the layer) leaves a hole in its
    group: the group's scales come from its other tokens (the hole's key slot holds a copy of one
    of them, so it moves no range; it is dropped when the keys are read back); a group with no other
    token is not stored. So protecting N tokens before the recent window keeps exactly N more in
    full precision than protecting none, and every other token is quantized with the same
    neighbours."""

    def __init__(self, bits: int, group: int, residual: int, protected=()) -> None:
        self.bits, self.group, self.residual = bits, group, residual
        self.protected = torch.tensor(sorted(set(protected)), dtype=torch.long)
        self.done = 0  # the positions below are quantized (a multiple of group)
        self.keys: Optional[Quantized] = None
        self.values: Optional[Quantized] = None
        self.slots = 0  # key slots stored (whole groups)
        self.holes: list[int] = []  # the key slots that hold a protected position's stand-in

    def absorb(self, keys: torch.Tensor, values: torch.Tensor, end: Optional[int] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Quantize the groups that ``residual`` tokens have passed from the front of the
        full-precision tail ``keys``/``values`` (the unprotected positions from the last group
        quantized up to ``end``, the number of tokens seen; by default the tail and the protected
        positions after that group); return what stays in full precision."""
        later = int((self.protected >= self.done).sum())
        end = self.done + keys.shape[2] + later if end is None else end
        upto = max(self.done, (end - self.residual) // self.group * self.group)
        if upto == self.done:
            return keys, values
        batch, heads, _, dim = keys.shape
        check(dim % self.group == 0, f"KIVI groups of {self.group} channels do not divide the head dimension {dim}")
        slots = torch.arange(self.done, upto).view(-1, self.group)  # (blocks, G) positions
        real = ~torch.isin(slots, self.protected)
        take = int(real.sum())
        check(
            int((~torch.isin(torch.arange(self.done, end), self.protected)).sum()) == keys.shape[2],
            "KIVI's full-precision tail does not match the positions seen",
        )
        if take == 0:  # groups of protected tokens only: nothing to store (the layer holds them)
            self.done = upto
            return keys, values
        if bool(real.all()):
            k = keys[:, :, :take].reshape(batch, heads, -1, self.group, dim)
            holes: list[int] = []
        else:
            index = real.flatten().cumsum(0).view_as(slots) - 1  # a real slot's index in the tail
            first = index.gather(1, real.long().argmax(1, keepdim=True))  # each group's first real token
            kept = real.any(1)  # groups with a token to quantize
            source, real = torch.where(real, index, first)[kept], real[kept]
            k = keys[:, :, source.flatten()].reshape(batch, heads, -1, self.group, dim)
            holes = [self.slots + int(i) for i in (~real.flatten()).nonzero().flatten()]
        v = values[:, :, :take].reshape(batch, heads, take, dim // self.group, self.group)
        qk, qv = quantize_groups(k.transpose(-1, -2), self.bits), quantize_groups(v, self.bits)
        self.keys = qk if self.keys is None else self.keys.appended(qk, 2)
        self.values = qv if self.values is None else self.values.appended(qv, 2)
        self.done, self.slots, self.holes = upto, self.slots + k.shape[2] * self.group, self.holes + holes
        return keys[:, :, take:], values[:, :, take:]

    @property
    def length(self) -> int:
        """The tokens stored (their slots less the holes)."""
        return self.slots - len(self.holes)

    def dequantize_into(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """The stored tokens' keys and values, (B, H, length, D) views of the buffers attention
        reads, written in place: a key block (B, H, D, G) lands transposed in its G rows."""
        if self.keys is None:
            return
        batch, heads, _, dim = keys.shape
        blocks = self.keys.data.shape[2]
        slots = keys if not self.holes else keys.new_empty(batch, heads, self.slots, dim)
        self.keys.dequantize_into(slots.view(batch, heads, blocks, self.group, dim).transpose(-1, -2))
        if self.holes:
            real = torch.ones(self.slots, dtype=torch.bool, device=keys.device)
            real[self.holes] = False
            keys.copy_(slots[:, :, real])
        self.values.dequantize_into(values.view(*values.shape[:3], -1, self.group))

    def tensors(self) -> list:
        return [] if self.keys is None else [*self.keys.tensors(), *self.values.tensors()]

    def branched(self) -> "KiviStore":
        return copy.copy(self)  # absorb() rebinds, never changes, its quantized tensors and holes


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


def _split(keys: torch.Tensor, values: torch.Tensor, protected: list[int]):
    """(the protected positions' keys and values, the others' in order)."""
    keep = torch.ones(keys.shape[2], dtype=torch.bool, device=keys.device)
    keep[protected] = False
    return (keys[:, :, protected], values[:, :, protected]), keys[:, :, keep], values[:, :, keep]


@dataclass(frozen=True)
class KIVI:
    """KIVI-style packed 2- or 4-bit cache (``bits``), ``protect``: 0, N or "detected".

    The full-precision recent tokens do not depend on ``protect``: groups of ``group_size`` tokens
    are aligned to the sequence's positions, protected ones included, and a protected token leaves
    a hole in its group (:class:`KiviStore`). Protected and unprotected caches are therefore
    compared at the same full-precision recent tokens (``residual`` to ``residual + group_size - 1``
    of them), with the N protected tokens held in full precision besides them. (Before, the groups
    were counted from after the protected tokens: at 1,024 tokens protecting one kept 1 + 159 in
    full precision against 128, so part of the "sink gain" was 31 more recent tokens.)"""

    bits: int = 2
    protect: KeepSinks = 0
    group_size: int = 32
    residual: int = 128

    name: ClassVar[str] = "kivi"
    window_rows: ClassVar[int] = 0
    per_layer_budgets: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check(self.bits in (2, 4), f"KIVI quantizes to 2 or 4 bits, got {self.bits}")
        check(self.group_size >= 1 and self.residual >= 0, "KIVI's group_size must be at least 1 and its residual at least 0")
        check_sink_setting(self.protect, "KIVI's protect")

    @property
    def recording(self) -> frozenset:
        return frozenset({"received"}) if self.protect == DETECTED else frozenset()

    def make_store(self, layer: int, protected=()) -> KiviStore:
        return KiviStore(self.bits, self.group_size, self.residual, protected)

    def apply(self, cache, tally=None):
        return quantize_cache(cache, self, tally)

    def label(self) -> str:
        return f"kivi {self.bits}-bit (protect {self.protect})"


@dataclass(frozen=True)
class StaticKV:
    """Static symmetric INT8/INT4 with per-head ranges from :func:`calibrate` (``scales``: layer ->
    (key peak (H,), value peak (H,))), the first ``protect`` tokens in full precision."""

    bits: int = 8
    protect: int = 0
    scales: dict = field(default_factory=dict, compare=False, repr=False)

    name: ClassVar[str] = "static"
    window_rows: ClassVar[int] = 0
    per_layer_budgets: ClassVar[bool] = False
    recording: ClassVar[frozenset] = frozenset()

    def __post_init__(self) -> None:
        check(self.bits in (4, 8), f"static KV quantization is INT8 or INT4, got {self.bits} bits")
        check_sink_setting(self.protect, "static quantization's protect", detected=False)

    def make_store(self, layer: int, protected=()) -> StaticStore:
        check(layer in self.scales, f"static KV quantization has no calibrated scales for layer {layer}: calibrate() first")
        return StaticStore(self.bits, *self.scales[layer])

    def apply(self, cache, tally=None):
        return quantize_cache(cache, self, tally)

    def label(self) -> str:
        return f"static int{self.bits} (protect {self.protect})"


def quantize_cache(cache, policy, tally=None):
    """Replace every full-attention layer of ``cache`` (just filled by a prefill) by a
    :class:`QuantizedKVLayer` under ``policy`` (:class:`KIVI` or :class:`StaticKV`); returns the
    :class:`~.base.Compression` (every key kept; ``sinks`` the protected positions)."""
    if not isinstance(policy, (KIVI, StaticKV)):
        raise not_a_press(policy)
    layers, report = started(cache)
    length = report.length
    report.sinks = sink_positions(policy.protect, length, tally, layers)
    from .quantized_layer import QuantizedKVLayer

    for index in layers:
        layer = cache.layers[index]
        sink, keys, values = _split(layer.keys, layer.values, report.sinks)
        cache.layers[index] = QuantizedKVLayer(sink, policy.make_store(index, report.sinks), keys, values)
        report.positions[index] = torch.arange(length).expand(*layer.keys.shape[:2], -1)
    report.bytes_after = cache_bytes(cache)
    return report


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
