"""Integers packed into bytes, and group-wise asymmetric quantization to them.

Real bytes, not fake quantization: a 4-bit tensor is held as ``uint8`` with two values a byte, a
2-bit one with four, plus one scale and one offset (float16) per group, so ``numel * element_size``
of what a cache holds is what it costs. Quantization is asymmetric min/max per group (KIVI's,
Liu et al. 2024): ``q = round((x - min) / scale)`` with ``scale = (max - min) / (2^bits - 1)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.errors import check

BITS = (2, 4, 8)
SCALE_DTYPE = torch.float16


def pack(q: torch.Tensor, bits: int, dim: int = -1) -> torch.Tensor:
    """Integers in [0, 2^bits) -> uint8 with ``dim`` ``bits / 8`` as long; its length times
    ``bits`` a multiple of 8.

    Planar: with m bytes along ``dim``, bits ``bits * i`` onwards of byte j hold value ``j + i * m``
    there, so that each plane of m values unpacks as a block (:func:`planes`): along the tokens
    of a cache, a plane is whole rows, which a copy writes as fast as a contiguous one, where every
    ``8 / bits``-th value would be a strided write."""
    per_byte, dim = 8 // bits, dim % q.dim()
    check(q.shape[dim] % per_byte == 0, f"{q.shape[dim]} values do not fill whole bytes at {bits} bits")
    q = q.to(torch.uint8).unflatten(dim, (per_byte, -1))
    packed = q.select(dim, 0).clone()
    for i in range(1, per_byte):
        packed |= q.select(dim, i) << (bits * i)
    return packed


def planes(packed: torch.Tensor, bits: int) -> list[torch.Tensor]:
    """The ``8 / bits`` planes of :func:`pack`'s bytes, each the bytes' shape in uint8 values. The
    shifts and masks run on the bytes read as the widest integers (up to 8 bytes) that their count
    and their offset in storage allow, which a mask per byte keeps exact: up to 8 times fewer
    elements than byte by byte."""
    mask, flat = (1 << bits) - 1, packed.contiguous().view(-1)
    wide = next(
        d
        for d in (torch.int64, torch.int32, torch.int16, torch.uint8)
        if flat.numel() % d.itemsize == 0 and flat.storage_offset() % d.itemsize == 0
    )
    words, lanes = flat.view(wide), int.from_bytes(bytes([mask]) * wide.itemsize, "little")
    return [((words >> (bits * i)) & lanes).view(torch.uint8).view(packed.shape) for i in range(8 // bits)]


def unpack(packed: torch.Tensor, bits: int, dim: int = -1) -> torch.Tensor:
    """The inverse of :func:`pack` along ``dim``: uint8 values, ``8 / bits`` times as many there."""
    return torch.cat(planes(packed, bits), dim)


@dataclass
class Quantized:
    """A tensor quantized in groups: ``data`` packed along ``pack_dim``, ``scale`` and ``low``
    (float16) one per group, shaped to broadcast over the unpacked tensor (a group runs along the
    axes where they have size 1), ``bits``."""

    data: torch.Tensor
    scale: torch.Tensor
    low: torch.Tensor
    bits: int
    pack_dim: int = -1

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.data, self.scale, self.low

    def dequantized(self, dtype: torch.dtype) -> torch.Tensor:
        shape = list(self.data.shape)
        shape[self.pack_dim] = shape[self.pack_dim] * 8 // self.bits
        out = torch.empty(shape, dtype=dtype, device=self.data.device)
        self.dequantize_into(out)
        return out

    def dequantize_into(self, out: torch.Tensor) -> None:
        """Write the dequantized tensor into ``out`` (its shape; any strides, any float dtype): a view
        of the buffer attention reads, so no copy follows. In float32, ``level * scale + low``
        rounded after the product and after the sum, whatever ``out``'s dtype, then cast. The levels
        go into ``out`` a plane at a time and are scaled there: no temporary of the tensor's size
        unless ``out`` is in another dtype than float32. (``addcmul`` fuses the two passes but runs
        several times slower where the scales broadcast along the last axis, as a value's do.)"""
        work = out if out.dtype == torch.float32 else torch.empty(out.shape, dtype=torch.float32, device=out.device)
        if self.bits == 8:
            work.copy_(self.data)
        else:
            m = self.data.shape[self.pack_dim]
            for i, plane in enumerate(planes(self.data, self.bits)):
                work.narrow(self.pack_dim, i * m, m).copy_(plane)
        work.mul_(self.scale.float()).add_(self.low.float())
        if work is not out:
            out.copy_(work)

    def appended(self, other: "Quantized", dim: int) -> "Quantized":
        """This and ``other`` (quantized alike) joined along ``dim`` (an axis before the groups)."""
        data, scale, low = (torch.cat([a, b], dim) for a, b in zip(self.tensors(), other.tensors()))
        return Quantized(data, scale, low, self.bits, self.pack_dim)

    def narrowed(self, dim: int, start: int, end: int) -> "Quantized":
        """Its groups ``start`` to ``end`` along ``dim`` (an axis before the groups), as views."""
        data, scale, low = (t.narrow(dim, start, end - start) for t in self.tensors())
        return Quantized(data, scale, low, self.bits, self.pack_dim)


def quantize_groups(x: torch.Tensor, bits: int, dim: int = -1, pack_dim: int = -1) -> Quantized:
    """``x`` quantized with one scale and offset per group, the values along ``dim`` (by default
    a row of the last axis), packed along ``pack_dim``."""
    check(bits in BITS, f"bits must be one of {', '.join(map(str, BITS))}, got {bits}")
    x32 = x.float()
    low, high = x32.amin(dim, keepdim=True), x32.amax(dim, keepdim=True)
    scale = ((high - low) / (2**bits - 1)).clamp(min=1e-8)
    q = ((x32 - low) / scale).round().clamp(0, 2**bits - 1)
    data = q.to(torch.uint8) if bits == 8 else pack(q, bits, pack_dim)
    return Quantized(data, scale.to(SCALE_DTYPE), low.to(SCALE_DTYPE), bits, pack_dim % x.dim())
