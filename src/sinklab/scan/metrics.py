"""Sink and outlier metrics: pure functions on tensors, each with its formula and source.

Conventions: ``A[l, h, i, j]`` is the attention weight of query i on key j in head h of layer l;
positions are 0-indexed unless a docstring says otherwise; T is the sequence length.
"""

from __future__ import annotations

import math
from typing import Optional

import torch


def first_token_mass(first_column: torch.Tensor, min_query: int = 1) -> torch.Tensor:
    """Mean attention on position 0 over query positions i >= ``min_query``.

    ``first_column``: (..., T) the weight A[..., i, 0] per query i (already averaged over the
    batch). Returns (...). ``min_query`` = 1 skips query 0, which can only attend to itself.
    """
    if not 0 <= min_query < first_column.shape[-1]:
        raise ValueError(f"min_query must lie in [0, {first_column.shape[-1] - 1}], got {min_query}")
    return first_column[..., min_query:].mean(-1)


def sink_scores(received: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    """Gu et al. (ICLR 2025) alpha_k, averaged over the queries *after* key k: (1 / (T - 1 - k)) sum_{i > k} A[i, k].

    ``received``: (..., T) the total attention each key position receives, summed over queries
    (and averaged over the batch); ``own``: (..., T) the weight A[k, k] of each key's own row.
    Gu et al. also average row k itself; sinklab leaves it out, as the first-token mass leaves out
    query 0: a row's weight on its own token is no sink, and under ReLU attention it is unbounded
    (ReLU Bigram-Backcopy models read Sink_1^0.3 = 0.125 from row 0 alone beside a first-token mass
    of 0.000). Where weights lie in [0, 1] (softmax, sigmoid) the two differ by at most 1 / (T - k).
    With k = 0 this is the first-token mass with ``min_query`` 1. The last key has no later
    query: 0. Returns (..., T); index k is 0-indexed.
    """
    T = received.shape[-1]
    later_queries = torch.arange(T - 1, -1, -1, dtype=received.dtype, device=received.device).clamp_min(1)
    return (received - own) / later_queries


def sink_rate(alpha: torch.Tensor, eps: float = 0.3) -> float:
    """Gu et al. Sink_k^eps: the share of (layer, head) pairs whose alpha_k exceeds ``eps``.

    ``alpha``: (L, H) scores of one key position (:func:`sink_scores`; Gu et al. use the first
    token, k = 1 in their 1-indexed notation). Layers not recorded (NaN) are left out.
    """
    recorded = ~alpha.isnan()
    return (alpha[recorded] > eps).double().mean().item()


#: The slack factor of :func:`cumulative_sinks` (the survey leaves it to the user). sinklab's choice:
#: under a causal mask uniform attention gives key 0 a total of H_T = 1 + 1/2 + ... + 1/T times the
#: mean (4.7 at T = 64, 6.1 at 256, 10 only from T = 12,400 on), so 10 flags no position of a model
#: without a sink at the lengths scanned.
CUMULATIVE_SLACK = 10.0


def cumulative_mass(received: torch.Tensor) -> torch.Tensor:
    """Each key's total received attention, a_k = sum_i A[i, k], over the mean total over the keys
    (1 when every row sums to one): the quantity the sink survey (Su et al. 2026) thresholds.
    ``received``: (..., T), one input's (and one layer's) totals, e.g. a row of
    :attr:`Record.received_by_sequence`; returns (..., T)."""
    received = received.double()
    return received / received.mean(-1, keepdim=True)


def cumulative_sinks(ratio: torch.Tensor, slack: float = CUMULATIVE_SLACK) -> list[int]:
    """The survey's cumulative-mass criterion on one input: the positions whose
    :func:`cumulative_mass` exceeds ``slack``. Any position can be flagged, so a sink that sits on a
    later token (a delimiter, a repeated word) shows where it is in that input; nothing is flagged
    for a layer not recorded (NaN)."""
    return [] if ratio.isnan().any() else [int(k) for k in (ratio > slack).nonzero().flatten()]


def secondary_sinks(alpha: torch.Tensor, top: int = 5, min_queries: int = 8, exclude: int = 1) -> list[tuple[int, float]]:
    """Key positions other than the first ``exclude`` with the largest alpha_k (mean over layers and heads).

    ``alpha``: (L, H, T). Positions with fewer than ``min_queries`` queries after them are skipped,
    since alpha_k of the last keys averages over too few rows to mean anything. Layers not recorded
    (NaN) are left out.
    """
    mean = alpha.double().nanmean(dim=(0, 1))  # (T,)
    usable = mean[exclude : max(exclude, mean.shape[0] - min_queries + 1)]
    if usable.numel() == 0:
        return []
    values, idx = usable.topk(min(top, usable.numel()))
    return [(int(i) + exclude, float(v)) for v, i in zip(values, idx)]


def dominance_ratio(hidden: torch.Tensor) -> torch.Tensor:
    """Dimension disparity of Li et al. (2026): max_j |h_j| / mean_j |h_j| over the last dimension."""
    a = hidden.abs().double()
    return a.amax(-1) / a.mean(-1).clamp_min(1e-30)


def massive_activations(
    hidden: torch.Tensor,
    layer: int,
    absolute: float = 100.0,
    relative: float = 1000.0,
    limit: int = 100,
    median_abs: Optional[float] = None,
) -> list[dict]:
    """Sun et al. (2024) massive activations: entries with |h| > ``absolute`` and > ``relative`` x median |h|.

    ``hidden``: (B, T, d) one layer's residual stream; the median is over all its entries
    (``median_abs``, when the caller has it already). Returns at most ``limit`` entries (largest
    first) as dicts with layer, batch, position, dim, value.
    """
    a = hidden.detach().abs()
    median = a.median().item() if median_abs is None else median_abs
    threshold = max(absolute, relative * median)
    hits = (a > threshold).nonzero()
    if hits.numel() == 0:
        return []
    values = hidden[hits[:, 0], hits[:, 1], hits[:, 2]]
    order = values.abs().argsort(descending=True)[:limit]
    return [
        {"layer": layer, "batch": int(b), "position": int(t), "dim": int(d), "value": float(v)}
        for (b, t, d), v in zip(hits[order].tolist(), values[order].tolist())
    ]


class Moments:
    """Running sums of x, x^2, x^3, x^4 (float64) for mean, variance and kurtosis of a stream."""

    def __init__(self) -> None:
        self.n = 0
        self.sums = torch.zeros(4, dtype=torch.float64)

    def add(self, x: torch.Tensor) -> None:
        x = x.detach().double().flatten()
        x2 = x * x
        self.n += x.numel()
        self.sums += torch.stack([x.sum(), x2.sum(), torch.dot(x2, x), torch.dot(x2, x2)]).cpu()  # dot: no x^3, x^4 copies

    def kurtosis(self) -> float:
        """Pearson kurtosis E[(x - mu)^4] / Var^2 (3 for a Gaussian); Bondarenko et al. (2023)."""
        if self.n == 0:
            return float("nan")
        m1, m2, m3, m4 = (self.sums / self.n).tolist()
        var = m2 - m1 * m1
        central4 = m4 - 4 * m1 * m3 + 6 * m1 * m1 * m2 - 3 * m1**4
        return central4 / (var * var) if var > 0 else float("nan")


def kurtosis(x: torch.Tensor) -> float:
    """Kurtosis of all entries of ``x`` (see :meth:`Moments.kurtosis`)."""
    m = Moments()
    m.add(x)
    return m.kurtosis()


def variance_by_position(total: torch.Tensor, total_sq: torch.Tensor, n: int) -> torch.Tensor:
    """Li et al. (2026) variance discrepancy: Var over a batch of the attention output, per position.

    ``total``, ``total_sq``: (..., T, F) sums over the n sequences of the attention output and of
    its square (F features: all heads' outputs before the output projection). Returns (..., T),
    the unbiased variance across sequences, averaged over features.
    """
    if n < 2:
        raise ValueError("the variance across sequences needs a batch of at least 2")
    mean = total / n
    var = (total_sq - n * mean * mean) / (n - 1)
    return var.clamp_min(0).mean(-1)


def super_neurons(
    act_first: torch.Tensor,
    act_rest_mean: torch.Tensor,
    down_weight: Optional[torch.Tensor],
    layer: int,
    min_ratio: float = 100.0,
    min_activation: float = 100.0,
    top: int = 5,
    out_dims: int = 3,
) -> list[dict]:
    """Super neurons (Li et al. 2026): FFN neurons far more active at position 0 than anywhere else.

    Criterion (configurable): mean |a_n| at position 0 is at least ``min_ratio`` times the mean
    |a_n| over all other positions, and at least ``min_activation``. ``act_first``,
    ``act_rest_mean``: (I,) those two means over the batch. For each neuron (strongest ratio
    first, at most ``top``) also reports the residual dimensions its down-projection column
    (``down_weight``: (d, I)) writes into most, weighted by the neuron's position-0 activation.
    """
    ratio = act_first / act_rest_mean.clamp_min(1e-12)
    chosen = ((ratio >= min_ratio) & (act_first >= min_activation)).nonzero().flatten()
    chosen = chosen[ratio[chosen].argsort(descending=True)][:top]
    out = []
    for n in chosen.tolist():
        entry = {
            "layer": layer,
            "neuron": n,
            "act_first": float(act_first[n]),
            "act_rest_mean": float(act_rest_mean[n]),
            "ratio": float(ratio[n]),
        }
        if down_weight is not None:
            write = down_weight[:, n].abs() * act_first[n]
            dims = write.topk(min(out_dims, write.numel()))
            entry["writes_to"] = [{"dim": int(d), "magnitude": float(v)} for v, d in zip(dims.values, dims.indices)]
        out.append(entry)
    return out


def null_mass(row_mass: torch.Tensor, prefix_mass: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Attention that goes nowhere in the content: 1 - sum_j A[i, j] averaged over query rows (the
    implicit slot of softmax1, a learned sink logit or gpt-oss's ``sinks``; for ReLU and sigmoid,
    how much of a row is not attended at all, negative where rows sum above one), plus the mass on
    learned sink tokens prepended to the sequence (``prefix_mass``), so that a sink that moved to a
    slot or a sink token is not counted as removed (Su et al. 2026)."""
    return 1.0 - row_mass + (prefix_mass if prefix_mass is not None else 0.0)


def norm_ratio_first(norms: torch.Tensor) -> torch.Tensor:
    """(..., T) norms -> (...): the first position's norm over the mean of the others. Guo et al.
    (2024)'s extreme-token triad uses it for value drain (value vectors) and residual peak (the
    residual stream)."""
    return norms[..., 0] / norms[..., 1:].mean(-1).clamp_min(1e-30)


def nan_to_none(value: float) -> Optional[float]:
    """NaN as None, so that JSON holds ``null`` (the kurtosis of a constant stream)."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value
