"""Attention normalisations (a registry), per-head output extras, and the eager reference ``attend``.

The contract every normalisation follows: ``norm(scores, mask) -> weights`` with

* ``scores``: (B, H, Tq, Tk) pre-normalisation scores (any float dtype; computed in float32),
* ``mask``: boolean, broadcastable to ``scores``, True where query i may attend to key j,
* ``weights``: (B, H, Tq, Tk) float32, exactly zero wherever ``mask`` is False.

Normalisations are ``nn.Module`` subclasses so that those with parameters (the learned sink
logit) train like any other layer. Add one with ``@register("name")``; the command line takes its
choices from :data:`ATTN_NORMS`, so ``--help`` is the catalogue.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn

from ..errors import SinklabError

ATTN_NORMS: dict[str, type["AttnNorm"]] = {}


def register(name: str) -> Callable[[type["AttnNorm"]], type["AttnNorm"]]:
    """Class decorator adding a normalisation to :data:`ATTN_NORMS` under ``name``."""

    def add(cls: type["AttnNorm"]) -> type["AttnNorm"]:
        if name in ATTN_NORMS:
            raise ValueError(f"attention normalisation {name!r} is registered twice")
        cls.name = name
        ATTN_NORMS[name] = cls
        return cls

    return add


def check_attn_name(name: str) -> str:
    """Return ``name`` if registered, else raise an error that lists the valid names."""
    if name not in ATTN_NORMS:
        raise SinklabError(f"unknown attention {name!r}; choose one of: {', '.join(ATTN_NORMS)}")
    return name


def make_norm(name: str, n_heads: int, **options) -> "AttnNorm":
    """Build the registered normalisation ``name`` for ``n_heads`` heads."""
    cls = ATTN_NORMS[check_attn_name(name)]
    try:
        return cls(n_heads, **options)
    except TypeError as exc:
        raise SinklabError(f"bad options for attention {name!r}: {exc}") from None


def visible_keys(mask: torch.Tensor) -> torch.Tensor:
    """Number of keys each query row may see, shape (..., Tq, 1), float32."""
    return mask.sum(dim=-1, keepdim=True, dtype=torch.float32)


class AttnNorm(nn.Module):
    """Base class: turns scores into attention weights. Subclasses implement ``forward``."""

    name: str = ""
    #: rows sum to exactly one (the softmax family without an implicit slot)
    sums_to_one: bool = False
    #: rows may leave mass in an implicit slot (an extra logit in the denominator)
    implicit_slot: bool = False
    #: masking is exactly "logit -inf where masked", then :meth:`from_logits` (the softmax family)
    masks_logits: bool = False

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads

    def forward(self, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if not self.masks_logits:  # pragma: no cover - every other normalisation overrides forward
            raise NotImplementedError
        return self.from_logits(masked_logits(scores, mask))

    def from_logits(self, logits: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        """Weights from float32 logits that are already -inf wherever the mask is False (only for
        ``masks_logits`` normalisations; lets :func:`~.reference.attend` mask in place)."""
        raise NotImplementedError


def masked_logits(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Float32 copy of ``scores`` with -inf wherever ``mask`` is False."""
    return torch.where(mask, scores.float(), float("-inf"))  # one pass; masked_fill(~mask) takes three


def _softmax(logits: torch.Tensor, extra_logit: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Softmax over the last axis, optionally with one extra logit column in the denominator.

    ``extra_logit`` broadcasts to (B, H, Tq, 1); its probability is dropped from the output, so the
    weights sum to 1 minus the extra slot's share.
    """
    if extra_logit is None:
        return torch.softmax(logits, dim=-1)
    extra = extra_logit.float().expand(*logits.shape[:-1], 1)
    return torch.softmax(torch.cat([logits, extra], dim=-1), dim=-1)[..., :-1]


@register("softmax")
class Softmax(AttnNorm):
    """Standard softmax over visible keys, in float32 (Vaswani et al. 2017)."""

    sums_to_one = True
    masks_logits = True

    def from_logits(self, logits):
        return _softmax(logits)


@register("relu")
class ReLU(AttnNorm):
    """ReLU of the scores, no sum-to-one normalisation (Ran-Milo 2026).

    Row i is divided by the number of non-BOS keys it can see, max(i, 1) for 0-indexed causal
    queries (visible keys minus one), so a head can output exactly zero by giving every key a
    non-positive score: the "do nothing" that softmax can only fake by dumping mass on BOS.
    """

    def forward(self, scores, mask):
        non_bos = (visible_keys(mask) - 1.0).clamp_min(1.0)
        return torch.relu(scores.float()) * mask / non_bos


@register("sigmoid")
class Sigmoid(AttnNorm):
    """Elementwise sigmoid(score + b), no normalisation (Ramapuram et al. 2024, sigmoid attention).

    The default bias b = -log(number of visible keys) keeps the initial row sums near one.
    """

    def __init__(self, n_heads: int, bias: Optional[float] = None) -> None:
        super().__init__(n_heads)
        self.bias = bias

    def forward(self, scores, mask):
        bias = -torch.log(visible_keys(mask)) if self.bias is None else self.bias
        return torch.sigmoid(scores.float() + bias) * mask


@register("softmax1")
class SoftmaxPlusOne(AttnNorm):
    """Softmax with an implicit zero logit in the denominator ("softmax + 1", Miller 2023).

    w_ij = exp(s_ij) / (1 + sum_k exp(s_ik)): a row can sum to less than one, so a head can do
    nothing by making every score very negative instead of attending to a sink token.
    """

    implicit_slot = True
    masks_logits = True

    def from_logits(self, logits):
        return _softmax(logits, extra_logit=logits.new_zeros(1, 1, 1, 1))


@register("sink_logit")
class SinkLogit(AttnNorm):
    """Softmax with a learned per-head logit in the denominator (the gpt-oss attention sink).

    w_ij = exp(s_ij) / (exp(b_h) + sum_k exp(s_ik)). With b_h = -inf this is exactly ``softmax``.
    """

    implicit_slot = True
    masks_logits = True

    def __init__(self, n_heads: int, init: float = 0.0) -> None:
        super().__init__(n_heads)
        self.sink = nn.Parameter(torch.full((n_heads,), float(init)))

    def from_logits(self, logits):
        return _softmax(logits, extra_logit=self.sink.view(1, -1, 1, 1))


@register("clipped_softmax")
class ClippedSoftmax(AttnNorm):
    """clip((zeta - gamma) * softmax + gamma, 0, 1) (Bondarenko et al. 2023, "Quantizable Transformers").

    gamma < 0 lets a weight reach exactly zero with finite scores, zeta > 1 lets it reach one.
    Defaults are the paper's BERT setting (gamma = -0.025, zeta = 1).
    """

    def __init__(self, n_heads: int, zeta: float = 1.0, gamma: float = -0.025) -> None:
        super().__init__(n_heads)
        if not zeta > gamma:
            raise SinklabError(f"clipped_softmax needs zeta > gamma, got zeta={zeta}, gamma={gamma}")
        self.zeta, self.gamma = zeta, gamma

    def forward(self, scores, mask):
        stretched = (self.zeta - self.gamma) * _softmax(masked_logits(scores, mask)) + self.gamma
        return stretched.clamp(0.0, 1.0) * mask


@register("softpick")
class Softpick(AttnNorm):
    """Rectified, not sum-to-one softmax (Zuhri et al. 2025, arXiv 2504.20966):
    w_ij = ReLU(exp(s_ij) - 1) / (sum_k |exp(s_ik) - 1| + eps) over the visible keys k.

    A key with a score at or below 0 gets exactly zero, and a row whose scores are all at or below 0
    is all zero: a head does nothing without a sink. Masked keys take no part (each would add
    |exp(-inf) - 1| = 1 to the denominator). Computed shifted by m = max(0, the row's largest
    visible score): numerator ReLU(exp(s - m) - exp(-m)), denominator the same sum plus eps
    exp(-m), the same ratio with no overflow (m >= 0 keeps exp(-m) <= 1).
    """

    def __init__(self, n_heads: int, eps: float = 1e-6) -> None:
        super().__init__(n_heads)
        self.eps = eps

    def forward(self, scores, mask):
        logits = masked_logits(scores, mask)
        shift = logits.amax(dim=-1, keepdim=True).clamp_min(0.0).detach()  # a constant of the row: same ratio
        floor = torch.exp(-shift)
        moved = (torch.exp(logits - shift) - floor) * mask  # exp(s) - 1, scaled by exp(-m); masked keys 0
        return torch.relu(moved) / (moved.abs().sum(dim=-1, keepdim=True) + self.eps * floor)
