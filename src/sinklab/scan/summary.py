"""The scanner's ``summary.json``, built from one registry of entries over a :class:`Record`.

Each entry is a short function named after its key that applies the pure metrics of
:mod:`.metrics` (where formulas and sources live) to the recorded statistics. A new metric: a
pure function in ``metrics.py``, a test on hand-made tensors in ``tests/test_metrics.py``, and an
``@entry("key")`` function here; the summary, ``sinklab scan`` and the pretraining scan pick it up.
An entry may return :data:`OMIT` to leave its key out (a statistic that does not apply).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Optional

import torch

from ..core.configs import setting
from ..core.errors import check
from ..models.subjects import Subject
from . import metrics
from .recorder import Record

OMIT = object()
ROW_MASS_TOLERANCE = 1e-3  # rows summing to one within this have no null slot to report


@dataclass
class MetricSettings:
    """Thresholds of the metrics, all written to the output next to the values."""

    eps: float = setting(
        0.3,
        help="Gu et al.'s threshold for alpha_k: a head sinks when its mean attention on the Sink_k key exceeds it, in (0, 1)",
    )
    sink_k: int = setting(1, help="key position of Sink_k^eps, 1-indexed as in Gu et al. (1: the first token)")
    min_query: int = setting(1, help="first query position averaged in the first-token mass")
    massive_absolute: float = setting(100.0, help="massive activation: |h| above this (Sun et al. 2024)", flag="--massive-abs")
    massive_relative: float = setting(1000.0, help="... and above this times the layer's median |h|", flag="--massive-rel")
    super_min_ratio: float = setting(
        100.0, help="super neuron: mean |a| at position 0 over mean |a| elsewhere", flag="--super-ratio"
    )
    super_min_activation: float = setting(100.0, help="super neuron: minimum mean |a| at position 0", flag="--super-min")
    secondary_top: int = setting(5, help="secondary sinks listed")

    def __post_init__(self) -> None:
        check(0 < self.eps < 1, f"--eps must lie in (0, 1), got {self.eps}")
        check(self.sink_k >= 1, f"--sink-k is 1-indexed and must be >= 1, got {self.sink_k}")
        check(self.min_query >= 0, f"--min-query must be >= 0, got {self.min_query}")

    def min_tokens(self) -> int:
        """The shortest input every metric is defined on: a query after position 0, after the
        first averaged query, and after the key of Sink_k."""
        return max(2, self.min_query + 1, self.sink_k + 1)

    def check_tokens(self, tokens: int) -> None:
        check(
            tokens >= self.min_tokens(),
            f"the input has {tokens} token(s) (BOS included); the metrics need at least {self.min_tokens()}: "
            f"a query after the first token (--min-query {self.min_query}, --sink-k {self.sink_k})",
        )


@dataclass
class ScanContext:
    """What an entry may read: the record, the settings, the subject and the token ids."""

    record: Record
    settings: MetricSettings
    subject: Subject
    ids: torch.Tensor

    @cached_property
    def alpha(self) -> torch.Tensor:
        return self.record.alpha  # (L, H, T)

    @cached_property
    def first(self) -> torch.Tensor:
        """(L, H) first-token mass."""
        return metrics.first_token_mass(self.record.first_column, self.settings.min_query)

    @cached_property
    def sink_share(self) -> torch.Tensor:
        """(L,) share of heads whose alpha at the Sink_k key exceeds eps (NaN: a layer not recorded)."""
        alpha = self.alpha[..., self.settings.sink_k - 1]
        return (alpha > self.settings.eps).double().mean(-1).masked_fill(alpha.isnan().any(-1), float("nan"))


SUMMARY_ENTRIES: dict[str, Callable[[ScanContext], Any]] = {}


def entry(key: str):
    """Register the function computing ``summary[key]``."""

    def add(fn: Callable[[ScanContext], Any]):
        if key in SUMMARY_ENTRIES:
            raise ValueError(f"summary entry {key!r} is registered twice")
        SUMMARY_ENTRIES[key] = fn
        return fn

    return add


def summarise(
    record: Record, settings: MetricSettings, subject: Subject, ids: torch.Tensor, keys: Optional[tuple[str, ...]] = None
) -> dict:
    """Every registered entry (or those in ``keys``), with entries that do not apply left out."""
    settings.check_tokens(record.tokens)
    ctx = ScanContext(record, settings, subject, ids)
    values = {key: SUMMARY_ENTRIES[key](ctx) for key in (keys or SUMMARY_ENTRIES)}
    return {k: v for k, v in values.items() if v is not OMIT}


def _first_layer(flags: torch.Tensor) -> Optional[int]:
    hits = flags.nonzero().flatten()
    return int(hits[0]) if hits.numel() else None


@entry("first_token_mass")
def _first_token_mass(c: ScanContext):
    """(L, H) :func:`metrics.first_token_mass`."""
    return c.first.tolist()


@entry("first_token_mass_by_layer")
def _first_token_mass_by_layer(c: ScanContext):
    return c.first.mean(-1).tolist()


@entry("sink_rate")
def _sink_rate(c: ScanContext):
    """Gu et al. Sink_k^eps over every (layer, head): :func:`metrics.sink_rate`."""
    s = c.settings
    return {"k": s.sink_k, "eps": s.eps, "value": metrics.sink_rate(c.alpha[..., s.sink_k - 1], s.eps), "tokens": c.record.tokens}


@entry("sink_alpha")
def _sink_alpha(c: ScanContext):
    """(L, H) Gu et al.'s alpha at the Sink_k key per head (a head sinks when it exceeds eps)."""
    return c.alpha[..., c.settings.sink_k - 1].tolist()


@entry("sink_share_by_layer")
def _sink_share_by_layer(c: ScanContext):
    return c.sink_share.tolist()


@entry("sink_start_layer")
def _sink_start_layer(c: ScanContext):
    """The first layer where at least half the heads sink."""
    return _first_layer(c.sink_share >= 0.5)


@entry("first_token_mass_start_layer")
def _first_token_mass_start_layer(c: ScanContext):
    return _first_layer(c.first.mean(-1) >= 0.5)


@entry("secondary_sinks")
def _secondary_sinks(c: ScanContext):
    """:func:`metrics.secondary_sinks`, with the tokens found there in the first sequences."""
    found = metrics.secondary_sinks(c.alpha, c.settings.secondary_top, exclude=c.settings.sink_k)
    return [
        {"position": pos, "alpha_mean": value, "tokens": c.subject.token_strings(c.ids[:3, pos].tolist())} for pos, value in found
    ]


@entry("cumulative_sinks")
def _cumulative_sinks(c: ScanContext):
    """:func:`metrics.cumulative_sinks` applied input by input (a sink on a later token sits at a
    different position in each input, so the batch mean would dilute it): per layer, position 0's
    mean ratio, the share of inputs that flag position 0 and the share that flag a later position;
    and the later tokens flagged, by how often (input and layer pairs)."""
    by_sequence = c.record.received_by_sequence  # (L, N, T)
    ratios = metrics.cumulative_mass(by_sequence)
    first, flag_first, flag_later, tokens = [], [], [], Counter()
    for layer in range(ratios.shape[0]):
        found = [metrics.cumulative_sinks(row) for row in ratios[layer]]
        recorded = not ratios[layer].isnan().any()
        first.append(float(ratios[layer, :, 0].mean()) if recorded else None)
        flag_first.append(sum(0 in hits for hits in found) / len(found) if recorded else None)
        flag_later.append(sum(any(k > 0 for k in hits) for hits in found) / len(found) if recorded else None)
        for seq, hits in enumerate(found):
            tokens.update(int(c.ids[seq, k]) for k in hits if k > 0)
    later = [
        {"token": c.subject.token_strings([token])[0], "id": token, "count": count} for token, count in tokens.most_common(10)
    ]
    return {
        "slack": metrics.CUMULATIVE_SLACK,
        "first_by_layer": first,
        "first_share_by_layer": flag_first,
        "later_share_by_layer": flag_later,
        "later_tokens": later,
    }


@entry("norms")
def _norms(c: ScanContext):
    """Key and value norms at the first position against the mean over the others (the "no-op" account)."""
    return {
        name: {"first": t[:, 0].tolist(), "rest_mean": t[:, 1:].mean(-1).tolist()}
        for name, t in (("key", c.record.key_norm), ("value", c.record.value_norm))
    }


@entry("massive_activations")
def _massive_activations(c: ScanContext):
    """:func:`metrics.massive_activations`, merged over sequences by the recorder."""
    return c.record.massive


#: The residual stream per layer at position 0 against the other positions: the dominance ratio
#: (:func:`metrics.dominance_ratio`, mean over the others) and the largest |h| (max over the others).
POSITION_SPLITS = {
    "dominance_ratio_first": lambda r: r.dominance[:, 0],
    "dominance_ratio_rest": lambda r: r.dominance[:, 1:].mean(-1),
    "max_abs_first": lambda r: r.max_abs[:, 0],
    "max_abs_rest": lambda r: r.max_abs[:, 1:].amax(-1),
}
for _key, _split in POSITION_SPLITS.items():
    entry(_key)(lambda c, split=_split: split(c.record).tolist())


@entry("max_over_median")
def _max_over_median(c: ScanContext):
    """Per layer, the largest |h| over the median |h| of the residual stream: the scale-free view of
    massive activations (Sun et al. 2024 require > 1000 x the median and > 100 absolutely; the
    absolute bar may never be reached by a small model)."""
    return (c.record.max_abs.amax(-1) / c.record.median_abs.clamp_min(1e-30)).tolist()


@entry("kurtosis")
def _kurtosis(c: ScanContext):
    """:func:`metrics.kurtosis` of the residual stream, per layer."""
    return [metrics.nan_to_none(v) for v in c.record.kurtosis.tolist()]


@entry("super_neurons")
def _super_neurons(c: ScanContext):
    """:func:`metrics.super_neurons` of every layer with an FFN probe."""
    record, s = c.record, c.settings
    if record.act_first is None or record.act_rest is None:
        return []
    found = []
    for layer in range(record.act_first.shape[0]):
        if record.act_first[layer].isnan().any():  # not recorded
            continue
        down = c.subject.down_proj_weight(layer)
        found += metrics.super_neurons(
            record.act_first[layer], record.act_rest[layer], down, layer, s.super_min_ratio, s.super_min_activation
        )
    return found


@entry("variance_by_position")
def _variance_by_position(c: ScanContext):
    """:func:`metrics.variance_by_position` per layer (None without a batch of 2)."""
    return c.record.variance.tolist() if c.record.variance is not None else None


@entry("null_mass")
def _null_mass(c: ScanContext):
    """(L, H) :func:`metrics.null_mass`: mass in an implicit slot or on learned sink tokens. Left
    out when rows sum to one over content keys (no slot, no sink tokens)."""
    n = c.subject.prefix_positions
    prefix = sum(c.record.columns[k][..., n:].mean(-1) for k in range(n)) if n else None
    mass = metrics.null_mass(c.record.row_mass, prefix)
    recorded = mass[~mass.isnan()]
    return mass.tolist() if recorded.numel() and recorded.abs().max().item() > ROW_MASS_TOLERANCE else OMIT


@entry("attention_zero_share")
def _attention_zero_share(c: ScanContext):
    """Per (layer, head), the share of the weights a query may give (its visible keys) that are
    exactly 0 (attention sparsity): ReLU, softpick and clipped softmax give zeros by design, a
    softmax only by underflow (a score some 104 below its row's largest, in float32)."""
    return c.record.zero_share.tolist() if c.record.zero_share is not None else OMIT


@entry("extreme_token_triad")
def _extreme_token_triad(c: ScanContext):
    """Per layer, Guo et al. (2024)'s triad at the first position: its attention share (the
    first-token mass), value drain (its value norm over the others') and residual peak (its
    residual norm over the others'), via :func:`metrics.norm_ratio_first`."""
    return {
        "attention_share": c.first.mean(-1).tolist(),
        "value_drain": metrics.norm_ratio_first(c.record.value_norm).tolist(),
        "residual_peak": metrics.norm_ratio_first(c.record.resid_norm).tolist(),
    }
