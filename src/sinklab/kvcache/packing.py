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


def pack(q: torch.Tensor, bits: int) -> torch.Tensor:
    """(..., n) integers in [0, 2^bits) -> (..., n * bits / 8) uint8; ``n * bits`` a multiple of 8."""
    per_byte = 8 // bits
    check(q.shape[-1] % per_byte == 0, f"{q.shape[-1]} values do not fill whole bytes at {bits} bits")
    q = q.to(torch.uint8).view(*q.shape[:-1], -1, per_byte)
    packed = torch.zeros(q.shape[:-1], dtype=torch.uint8, device=q.device)
    for i in range(per_byte):
        packed |= q[..., i] << (bits * i)
    return packed


def unpack(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """The inverse of :func:`pack`: (..., m) uint8 -> (..., m * 8 / bits) uint8 values."""
    per_byte, mask = 8 // bits, (1 << bits) - 1
    parts = [(packed >> (bits * i)) & mask for i in range(per_byte)]
    return torch.stack(parts, dim=-1).flatten(-2)


@dataclass
class Quantized:
    """A tensor quantized in groups along its last axis: ``data`` packed, ``scale`` and ``low``
    (float16) per group, ``bits``."""

    data: torch.Tensor
    scale: torch.Tensor
    low: torch.Tensor
    bits: int

    def tensors(self) -> tuple:
        return self.data, self.scale, self.low

    def dequantized(self, dtype: torch.dtype) -> torch.Tensor:
        out = torch.empty(*self.data.shape[:-1], self.data.shape[-1] * 8 // self.bits, dtype=dtype, device=self.data.device)
        self.dequantize_into(out)
        return out

    def dequantize_into(self, out: torch.Tensor) -> None:
        """Write the dequantized tensor into ``out`` (its shape; any strides, any float dtype): a view
        of the buffer attention reads, so no copy follows. In float32, ``level * scale + low``
        rounded after the product and after the sum, whatever ``out``'s dtype, then cast."""
        levels = (self.data if self.bits == 8 else unpack(self.data, self.bits)).float()
        if out.dtype == torch.float32:
            torch.mul(levels, self.scale.float(), out=out)
            out.add_(self.low.float())
        else:
            out.copy_(levels.mul_(self.scale.float()).add_(self.low.float()))

    def appended(self, other: "Quantized", dim: int) -> "Quantized":
        """This and ``other`` (quantized alike) joined along ``dim`` (an axis before the groups)."""
        return Quantized(*(torch.cat([a, b], dim) for a, b in zip(self.tensors(), other.tensors())), self.bits)


def quantize_groups(x: torch.Tensor, bits: int) -> Quantized:
    """``x`` (..., G) quantized with one scale and offset per row of G values."""
    check(bits in BITS, f"bits must be one of {', '.join(map(str, BITS))}, got {bits}")
    x32 = x.float()
    low, high = x32.amin(-1, keepdim=True), x32.amax(-1, keepdim=True)
    scale = ((high - low) / (2**bits - 1)).clamp(min=1e-8)
    q = ((x32 - low) / scale).round().clamp(0, 2**bits - 1)
    data = q.to(torch.uint8) if bits == 8 else pack(q, bits)
    return Quantized(data, scale.to(SCALE_DTYPE), low.to(SCALE_DTYPE), bits)
