"""Per-head extras and :class:`AttentionSpec`, the one description of an attention variant.

An extra acts on each head at one of two stages: on the value states before aggregation
(``stage="values"``, ``forward(v) -> v``) or on the head's output after aggregation and before the
output projection (``stage="output"``, ``forward(z, x) -> z``). To add one: write its module, add a
boolean field to :class:`AttentionSpec` and an entry to :data:`HEAD_EXTRAS`; the native model, the
variant label, the trigger lab's variant table, pretraining and the command-line flags all pick it up.
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


#: Where an extra acts: on the value states before the heads aggregate them, or on a head's output.
STAGES = ("values", "output")


class ValueGate(nn.Module):
    """A per-channel variant of Value-State Gated Attention (Bu et al. 2025, arXiv 2510.09017): each
    token's value vector v_j is multiplied, element by element, by a sigmoid gate computed from
    v_j itself, per head: v_j <- v_j * sigmoid(v_j W_h + b_h).

    It was written from the paper's abstract, before its text was available. The paper's own gate is
    :class:`VGAGate` (one number per head and token, from the token's value vector across all heads,
    no bias); this one, per channel, from its own head's value alone, with a bias, stays as sinklab's
    ablation of that choice (a reviewer of the paper asked whether g_j is a scalar), and its measured
    rows keep their name.
    """

    def __init__(self, d_model: int, n_heads: int, head_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_heads, head_dim, head_dim))  # the model draws it as its other matrices
        self.bias = nn.Parameter(torch.zeros(n_heads, 1, head_dim))

    def values(self, v: torch.Tensor) -> torch.Tensor:
        """Gate openings in [0, 1], shape (B, H, T, D)."""
        return torch.sigmoid(torch.einsum("bhtd,hde->bhte", v, self.weight) + self.bias)

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        return v * self.values(v)


class VGAGate(nn.Module):
    """Value-State Gated Attention (Bu et al. 2025, arXiv 2510.09017v3, read through a detailed
    summary and its OpenReview reviews; the PDF was not reachable here), Section 3's placement with
    Appendix B's multi-head gate: one gate per head and token, computed from the token's whole value
    vector V_j (every head's values side by side), g_j = sigmoid(V_j W_g) with W_g of shape
    (heads x head_dim, heads) and no bias, scaling key j's contribution, z_i = sum_j g_j a_ij V_j
    (their Eqs. 4 and 6). Closing g_s cuts the gradient that would otherwise drain the sink's value
    (their Eqs. 7-8).

    The paper places the gate twice: Section 3 (above, the equations its gradient analysis rests on)
    on each key's value before aggregation, Appendix B on each query's head output, o_i * g_i. The
    Section 3 placement is implemented; Appendix B's is not.
    """

    def __init__(self, d_model: int, n_heads: int, head_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_heads * head_dim, n_heads))  # the model draws it as its other matrices

    def values(self, v: torch.Tensor) -> torch.Tensor:
        """Gate openings in [0, 1], shape (B, H, T, 1): one per head and token."""
        B, H, T, D = v.shape
        whole = v.transpose(1, 2).reshape(B, T, H * D)  # each token's value vector, every head's side by side
        return torch.sigmoid(whole @ self.weight).transpose(1, 2).unsqueeze(-1)

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        return v * self.values(v)


@dataclass(frozen=True)
class HeadExtra:
    """A per-head extra: its command-line help, the module that applies it, and where: on the
    value states before aggregation (``values``) or on the head's output (``output``)."""

    help: str
    build: Callable[[int, int, int], nn.Module]  # (d_model, n_heads, head_dim) -> module
    stage: str = "output"

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"a per-head extra acts at one of the stages {', '.join(STAGES)}, not {self.stage!r}")


#: In the order they apply: the norm first, so that a closed gate can still silence a head.
HEAD_EXTRAS: dict[str, HeadExtra] = {
    "head_norm": HeadExtra("head-wise RMSNorm of the attention output (Li et al. 2026)", HeadNorm),
    "gate": HeadExtra("head-wise sigmoid output gate (Qiu et al. 2025)", HeadGate),
    "value_gate": HeadExtra(
        "per-channel value gate: each value channel gated by a sigmoid of the head's value (a variant of Bu et al. 2025)",
        ValueGate,
        stage="values",
    ),
    "vga": HeadExtra(
        "Value-State Gated Attention (Bu et al. 2025): each token's values scaled, per head, by a sigmoid of the token's "
        "value vector across all heads",
        VGAGate,
        stage="values",
    ),
}


@dataclass(frozen=True)
class AttentionSpec:
    """An attention variant: a registered normalisation, its options, and per-head extras."""

    attn: str = "softmax"
    options: dict = field(default_factory=dict)
    gate: bool = False
    head_norm: bool = False
    value_gate: bool = False
    vga: bool = False

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

    @classmethod
    def from_flags(cls, row: dict) -> "AttentionSpec":
        """The variant of a result row (:meth:`flags`); an extra the row predates is off."""
        return cls(row["attn"], **{name: row.get(name, False) for name in EXTRA_NAMES})


#: The extras in AttentionSpec's field order: the order of labels, result columns and variant tables.
EXTRA_NAMES = tuple(f.name for f in fields(AttentionSpec) if f.name not in ("attn", "options"))


def extras_off(attention: dict) -> dict:
    """A saved variant (``AttentionSpec`` as a dict) written before some extras existed, with
    those extras off: what it ran (a config migration's step)."""
    return {**{name: False for name in EXTRA_NAMES}, **attention}


def with_extras_off(config: dict) -> dict:
    """A saved configuration whose ``attention`` (when it has one) was written before some extras
    existed, with those extras off (:func:`extras_off`)."""
    return {**config, "attention": extras_off(config["attention"])} if "attention" in config else config


if set(EXTRA_NAMES) != set(HEAD_EXTRAS):  # pragma: no cover - caught at import when adding an extra
    raise TypeError(f"AttentionSpec's extra fields {sorted(EXTRA_NAMES)} differ from HEAD_EXTRAS {sorted(HEAD_EXTRAS)}")


class HeadOutput(nn.Module):
    """The enabled extras of ``spec``, applied in :data:`HEAD_EXTRAS` order at their stage; each
    is an attribute named after its extra (``head_out.gate``)."""

    def __init__(self, d_model: int, n_heads: int, head_dim: int, spec: AttentionSpec) -> None:
        super().__init__()
        enabled = [name for name in HEAD_EXTRAS if name in spec.extras]
        self.order = tuple(name for name in enabled if HEAD_EXTRAS[name].stage == "output")
        self.on_values = tuple(name for name in enabled if HEAD_EXTRAS[name].stage == "values")
        for name in enabled:
            setattr(self, name, HEAD_EXTRAS[name].build(d_model, n_heads, head_dim))

    def values(self, v: torch.Tensor) -> torch.Tensor:
        """v: (B, H, T, D) value states, as the heads will aggregate them."""
        for name in self.on_values:
            v = getattr(self, name)(v)
        return v

    def forward(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """z: (B, H, T, D) head outputs; x: (B, T, d_model) the attention block's input."""
        for name in self.order:
            z = getattr(self, name)(z, x)
        return z
