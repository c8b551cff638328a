"""Per-head extras and :class:`AttentionSpec`, the one description of an attention variant.

An extra acts on each head's output after value aggregation and before the output projection.
To add one: write its module (``forward(z, x) -> z``), add a boolean field to
:class:`AttentionSpec` and an entry to :data:`HEAD_EXTRAS`; the native model, the variant label,
the trigger lab's variant table, pretraining and the command-line flags all pick it up.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable

import torch
from torch import nn

from .norms import check_attn_name


class HeadNorm(nn.Module):
    """RMSNorm over each head's output, one learnable scale shared by the heads (Li et al. 2026)."""

    def __init__(self, d_model: int, n_heads: int, head_dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(head_dim))
        self.eps = eps

    def forward(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + self.eps) * self.scale


class HeadGate(nn.Linear):
    """A sigmoid gate per head, computed from the query token's input x_i, multiplying the head's
    output (Qiu et al. 2025, head-wise gating; Bondarenko et al. 2023, gated attention)."""

    def __init__(self, d_model: int, n_heads: int, head_dim: int) -> None:
        super().__init__(d_model, n_heads)

    def values(self, x: torch.Tensor) -> torch.Tensor:
        """Gate openings in [0, 1], shape (B, T, H)."""
        return torch.sigmoid(super().forward(x))

    def forward(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return z * self.values(x).transpose(1, 2).unsqueeze(-1)  # (B, H, T, 1)


@dataclass(frozen=True)
class HeadExtra:
    """A per-head extra: its command-line help and the module that applies it."""

    help: str
    build: Callable[[int, int, int], nn.Module]  # (d_model, n_heads, head_dim) -> module


#: In the order they apply: the norm first, so that a closed gate can still silence a head.
HEAD_EXTRAS: dict[str, HeadExtra] = {
    "head_norm": HeadExtra("head-wise RMSNorm of the attention output (Li et al. 2026)", HeadNorm),
    "gate": HeadExtra("head-wise sigmoid output gate (Qiu et al. 2025)", HeadGate),
}


@dataclass(frozen=True)
class AttentionSpec:
    """An attention variant: a registered normalisation, its options, and per-head extras."""

    attn: str = "softmax"
    options: dict = field(default_factory=dict)
    gate: bool = False
    head_norm: bool = False

    def __post_init__(self) -> None:
        check_attn_name(self.attn)

    @property
    def extras(self) -> tuple[str, ...]:
        """The enabled extras, in field order."""
        return tuple(name for name in EXTRA_NAMES if getattr(self, name))

    @property
    def label(self) -> str:
        """The one spelling of the variant in tables, file names and run names: ``softmax+gate``."""
        return self.attn + "".join(f"+{name}" for name in self.extras)

    def with_each_extra(self) -> list["AttentionSpec"]:
        """This variant with each per-head extra switched on alone (the rows of a variant sweep)."""
        switched: list[dict[str, Any]] = [{name: True} for name in EXTRA_NAMES if not getattr(self, name)]
        return [replace(self, **switch) for switch in switched]

    def flags(self) -> dict:
        """``attn`` and one boolean per extra: the columns a result row carries."""
        return {"attn": self.attn, **{name: getattr(self, name) for name in EXTRA_NAMES}}


#: The extras in AttentionSpec's field order: the order of labels, result columns and variant tables.
EXTRA_NAMES = tuple(f.name for f in fields(AttentionSpec) if f.name not in ("attn", "options"))
if set(EXTRA_NAMES) != set(HEAD_EXTRAS):  # pragma: no cover - caught at import when adding an extra
    raise TypeError(f"AttentionSpec's extra fields {sorted(EXTRA_NAMES)} differ from HEAD_EXTRAS {sorted(HEAD_EXTRAS)}")


class HeadOutput(nn.Module):
    """The enabled extras of ``spec``, applied in :data:`HEAD_EXTRAS` order; each is an attribute
    named after its extra (``head_out.gate``)."""

    def __init__(self, d_model: int, n_heads: int, head_dim: int, spec: AttentionSpec) -> None:
        super().__init__()
        self.order = tuple(name for name in HEAD_EXTRAS if name in spec.extras)
        for name in self.order:
            setattr(self, name, HEAD_EXTRAS[name].build(d_model, n_heads, head_dim))

    def forward(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """z: (B, H, T, D) head outputs; x: (B, T, d_model) the attention block's input."""
        for name in self.order:
            z = getattr(self, name)(z, x)
        return z
