"""KIVI (Liu et al. 2024): keys quantized per channel over groups of ``group_size`` tokens, values
per token over groups of ``group_size`` channels, asymmetric, 2 or 4 bits, as packed integers
(:mod:`..packing`: the bytes are real). The most recent tokens stay in full precision,
``residual`` to ``residual + group_size - 1`` of them, and are quantized a group at a time as newer
ones arrive (KIVI's streaming rule). The groups and the recent window are where an unprotected cache
has them (:class:`KiviStore`), so protected and unprotected caches are compared at the same
full-precision recent tokens, the protected ones counted besides them: ``protect=N`` holds exactly N
more tokens in full precision (fewer where protected tokens fall in the recent window, which holds
them anyway).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Optional

import torch

from ...core.errors import check
from ..packing import Quantized, quantize_groups
from ..quantizer import Quantizer
from ..registry import KeepSinks, register_policy


class KiviStore:
    """KIVI's quantized part of one layer, in blocks of G token slots: keys (B, H, blocks, G, D)
    with their scales per channel over the block's tokens, values (B, H, blocks, G, D/G, G) with
    theirs per token over groups of G channels.

    Groups of ``group`` tokens sit where an unprotected cache puts them: at positions 0 to G - 1,
    G to 2G - 1, ... of the sequence (the positions counted with the protected ones). A group is
    quantized once the newest token is ``residual`` or more past its end, so after ``n`` tokens the
    positions from ``(n - residual) // G * G`` on are the full-precision recent tokens, between
    ``residual`` and ``residual + G - 1`` of them (KIVI's streaming rule), the same ones whatever
    is protected. A protected position (``protected``, held apart by the layer) leaves a hole in its
    group: the group's scales come from its other tokens (the hole's slot holds a copy of one of
    them, so it moves no range; it is dropped when the store is read back); a group with no other
    token is not stored. So protecting N tokens before the recent window keeps exactly N more in
    full precision than protecting none, and every other token is quantized with the same
    neighbours."""

    def __init__(self, bits: int, group: int, residual: int, protected=()) -> None:
        self.bits, self.group, self.residual = bits, group, residual
        self.protected = torch.tensor(sorted(set(protected)), dtype=torch.long)
        self.done = 0  # the positions below are quantized (a multiple of group)
        self.keys: Optional[Quantized] = None
        self.values: Optional[Quantized] = None
        self.slots = 0  # token slots stored (whole groups), keys and values alike
        self.holes: list[int] = []  # the slots that hold a protected position's stand-in

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
            source: object = slice(0, take)
            holes: list[int] = []
        else:
            index = real.flatten().cumsum(0).view_as(slots) - 1  # a real slot's index in the tail
            first = index.gather(1, real.long().argmax(1, keepdim=True))  # each group's first real token
            kept = real.any(1)  # groups with a token to quantize
            source, real = torch.where(real, index, first)[kept].flatten(), real[kept]
            holes = [self.slots + int(i) for i in (~real.flatten()).nonzero().flatten()]
        k = keys[:, :, source].reshape(batch, heads, -1, self.group, dim)
        v = values[:, :, source].reshape(batch, heads, -1, self.group, dim // self.group, self.group)
        # keys per channel over the group's tokens, values per token over groups of channels; both
        # packed along the tokens, so that a block unpacks as whole rows (packing.pack)
        qk, qv = quantize_groups(k, self.bits, dim=3, pack_dim=3), quantize_groups(v, self.bits, dim=-1, pack_dim=3)
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
        reads, written in place: each run of whole blocks straight into its rows, a block with
        holes (a few protected tokens) through a buffer of its G slots, its real rows then copied."""
        if self.keys is None:
            return
        batch, heads, _, dim = keys.shape
        group, holes, row = self.group, set(self.holes), 0
        for first, last, holed in self._runs(sorted({h // group for h in holes})):
            k, v = self.keys.narrowed(2, first, last), self.values.narrowed(2, first, last)
            if holed:
                real = [s for s in range(group) if first * group + s not in holes]
                n = len(real)
                keys[:, :, row : row + n] = k.dequantized(keys.dtype).view(batch, heads, group, dim)[:, :, real]
                values[:, :, row : row + n] = v.dequantized(values.dtype).view(batch, heads, group, dim)[:, :, real]
            else:
                n = (last - first) * group
                k.dequantize_into(keys[:, :, row : row + n].view(batch, heads, last - first, group, dim))
                v.dequantize_into(values[:, :, row : row + n].view(batch, heads, last - first, group, dim // group, group))
            row += n

    def _runs(self, holed: list[int]):
        """(first, last, has holes) over the stored blocks: runs of whole blocks between the
        blocks with holes, each of those alone."""
        start = 0
        for block in holed:
            if block > start:
                yield start, block, False
            yield block, block + 1, True
            start = block + 1
        if start < self.keys.data.shape[2]:
            yield start, self.keys.data.shape[2], False

    def tensors(self) -> list:
        return [] if self.keys is None else [*self.keys.tensors(), *self.values.tensors()]

    def branched(self) -> "KiviStore":
        return copy.copy(self)  # absorb() rebinds, never changes, its quantized tensors and holes


@register_policy("kivi")
@dataclass(frozen=True)
class KIVI(Quantizer):
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

    bit_widths = (2, 4)
    protects = "any"
    run_settings = ("group_size", "residual")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.group_size >= 1 and self.residual >= 0, "KIVI's group_size must be at least 1 and its residual at least 0")

    @classmethod
    def check_usable(cls, head_dim: int, settings: dict) -> None:
        """Its value groups are ``group_size`` channels of a head: a size must divide the head dimension."""
        size = settings.get("group_size", cls.group_size)
        check(
            head_dim % size == 0,
            f"--quant kivi: groups of --group-size {size} channels do not divide this model's head dimension "
            f"{head_dim}; give a --group-size that divides {head_dim}",
        )

    def make_store(self, layer: int, protected: list[int]) -> KiviStore:
        return KiviStore(self.bits, self.group_size, self.residual, protected)
