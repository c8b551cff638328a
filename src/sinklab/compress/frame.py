"""A compression run's summary as tidy tables: one row per cell of the keep-sink table (presses and
quantizers in one schema), and one per paired comparison with the sinks kept against none."""

from __future__ import annotations

import statistics
from typing import Iterator, Optional

from ..accuracy import verdict_columns
from ..core.results import table_rows
from .summary import current

#: What names a cell: the policy, its family, a press's ratio or a quantizer's bits (None for the
#: other), the sinks kept (a quantizer's protect) and the context.
CELL_KEYS = ("policy", "kind", "ratio", "bits", "keep_sinks", "context")
EFFECT_KEYS_LEAD = ("policy", "kind", "ratio", "bits", "context", "keep_sinks")


def cell_rows(summary: dict, kind: Optional[str] = None) -> Iterator[dict]:
    """One row per cell (:data:`CELL_KEYS`; only those of ``kind``, "press" or "quantizer", when
    given): ``ppl_<text>`` (perplexity of the continuation through the compressed cache),
    ``ppl_ratio_<text>`` (against the full cache's: 1 is no loss), ``passkey_accuracy`` (a fraction
    of the prompts, in [0, 1]), ``key_logprob`` (the true key's log-probability, nats, mean over
    prompts), ``kept_fraction`` (of the context's keys, per compressed layer and head; 1 for a
    quantizer) and ``bytes_ratio`` (the whole cache's bytes against the dense cache's); with
    ``--accuracy``, per task ``acc_<task>`` (lm-eval's test-split accuracy, the shots read through
    the compressed cache) and ``gold_loglik_<task>`` (the correct choice's mean log-likelihood, nats)."""
    cells = current(summary)["cells"]
    return table_rows(summary, (_flat(cell) for cell in cells if kind in (None, cell["kind"])))


def quantized_rows(summary: dict) -> Iterator[dict]:
    """The quantizers' rows of :func:`cell_rows` (the table a run of schema 2 kept apart)."""
    return cell_rows(summary, "quantizer")


def _flat(cell: dict) -> dict:
    row = {key: cell[key] for key in CELL_KEYS}
    row |= {f"ppl_{text}": value for text, value in cell.get("ppl", {}).items()}
    row |= {f"ppl_ratio_{text}": value for text, value in cell.get("ppl_ratio", {}).items()}
    if "passkey" in cell:
        row |= {"passkey_accuracy": cell["passkey"]["accuracy"], "key_logprob": cell["passkey"]["logprob_mean"]}
    for task, scored in cell.get("choice", {}).items():
        row |= {f"acc_{task}": scored["acc"], f"gold_loglik_{task}": statistics.fmean(scored["gold_loglik"])}
    return row | {"kept_fraction": cell["kept_fraction"], "bytes_ratio": cell["bytes_ratio"]}


EFFECT_KEYS = ("accuracy_change", "logprob_change", "logprob_change_std", "prompts_more_likely", "prompts")


def sink_effect_rows(summary: dict, kind: Optional[str] = None) -> Iterator[dict]:
    """One row per (policy, its ratio or bits, context, keep_sinks other than 0; only ``kind``'s when
    given): ``ppl_change_<text>`` (the relative change of perplexity against keeping no sink: -0.1
    is 10 % lower), ``accuracy_change`` (passkey accuracy, in fractions), ``logprob_change`` (nats,
    the mean over prompts) with ``logprob_change_std`` (the spread of the per-prompt changes) and
    ``prompts_more_likely`` (prompts whose key got more probable, of ``prompts``); with
    ``--accuracy``, per task the paired ``acc_change_<task>`` with its 95 % interval (``_low``,
    ``_high``), McNemar's ``mcnemar_p_<task>`` and ``gold_loglik_change_<task>`` (nats)."""
    effects = current(summary)["sink_effect"]
    return table_rows(summary, (_effect(e) for e in effects if kind in (None, e["kind"])))


def quantized_sink_effect_rows(summary: dict) -> Iterator[dict]:
    """The quantizers' rows of :func:`sink_effect_rows` (the table a run of schema 2 kept apart)."""
    return sink_effect_rows(summary, "quantizer")


def _effect(effect: dict) -> dict:
    row = {key: effect[key] for key in EFFECT_KEYS_LEAD}
    row |= {f"ppl_change_{text}": value for text, value in effect.get("ppl_change", {}).items()}
    for task, change in effect.get("choice_change", {}).items():
        row |= {f"{column}_{task}": value for column, value in verdict_columns(change).items()}
    return row | {key: effect[key] for key in EFFECT_KEYS if key in effect}


COMPRESS_TABLES = {
    "cells": cell_rows,
    "sink_effect": sink_effect_rows,
    "quantized": quantized_rows,
    "quantized_sink_effect": quantized_sink_effect_rows,
}
