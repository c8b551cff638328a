"""A compression run's summary as tidy tables: one row per cell of the keep-sink table (presses,
and quantizers), and one per paired comparison with the sinks kept against none."""

from __future__ import annotations

import statistics
from typing import Iterator

from ..accuracy import verdict_columns
from ..core.results import table_rows


def cell_rows(summary: dict) -> Iterator[dict]:
    """One row per (press, ratio, keep_sinks, context): ``ppl_<text>`` (perplexity of the
    continuation through the compressed cache), ``ppl_ratio_<text>`` (against the full cache's:
    1 is no loss), ``passkey_accuracy`` (a fraction of the prompts, in [0, 1]),
    ``key_logprob`` (the true key's log-probability, nats, mean over prompts), ``kept_fraction``
    (of the context's keys, per compressed layer and head) and ``bytes_ratio`` (the whole cache's
    bytes against the dense cache's); with ``--accuracy``, per task ``acc_<task>`` (lm-eval's
    test-split accuracy, the shots read through the compressed cache) and ``gold_loglik_<task>``
    (the correct choice's mean log-likelihood, nats)."""
    return table_rows(summary, (_flat(cell) for cell in summary["cells"]))


def quantized_rows(summary: dict) -> Iterator[dict]:
    """One row per (quantizer, bits, protect, context), with the columns of :func:`cell_rows`
    (``kept_fraction`` is 1: a quantizer keeps every key)."""
    return table_rows(summary, (_flat(cell, ("quantizer", "bits", "protect", "context")) for cell in summary["quantized"]))


def _flat(cell: dict, keys: tuple = ("press", "ratio", "keep_sinks", "context")) -> dict:
    row = {key: cell[key] for key in keys}
    row |= {f"ppl_{text}": value for text, value in cell.get("ppl", {}).items()}
    row |= {f"ppl_ratio_{text}": value for text, value in cell.get("ppl_ratio", {}).items()}
    if "passkey" in cell:
        row |= {"passkey_accuracy": cell["passkey"]["accuracy"], "key_logprob": cell["passkey"]["logprob_mean"]}
    for task, scored in cell.get("choice", {}).items():
        row |= {f"acc_{task}": scored["acc"], f"gold_loglik_{task}": statistics.fmean(scored["gold_loglik"])}
    return row | {"kept_fraction": cell["kept_fraction"], "bytes_ratio": cell["bytes_ratio"]}


EFFECT_KEYS = ("accuracy_change", "logprob_change", "logprob_change_std", "prompts_more_likely", "prompts")


def sink_effect_rows(summary: dict) -> Iterator[dict]:
    """One row per (press, ratio, context, keep_sinks other than 0): ``ppl_change_<text>`` (the
    relative change of perplexity against keeping no sink: -0.1 is 10 % lower), ``accuracy_change``
    (passkey accuracy, in fractions), ``logprob_change`` (nats, the mean over prompts) with
    ``logprob_change_std`` (the spread of the per-prompt changes) and ``prompts_more_likely``
    (prompts whose key got more probable, of ``prompts``); with ``--accuracy``, per task the paired
    ``acc_change_<task>`` with its 95 % interval (``_low``, ``_high``), McNemar's ``mcnemar_p_<task>``
    and ``gold_loglik_change_<task>`` (nats)."""
    return table_rows(summary, (_effect(e, ("press", "ratio", "context", "keep_sinks")) for e in summary["sink_effect"]))


def quantized_sink_effect_rows(summary: dict) -> Iterator[dict]:
    """As :func:`sink_effect_rows`, per (quantizer, bits, context, protect other than 0)."""
    effects = summary["quantized_sink_effect"]
    return table_rows(summary, (_effect(e, ("quantizer", "bits", "context", "protect")) for e in effects))


def _effect(effect: dict, keys: tuple) -> dict:
    row = {key: effect[key] for key in keys}
    row |= {f"ppl_change_{text}": value for text, value in effect.get("ppl_change", {}).items()}
    for task, change in effect.get("choice_change", {}).items():
        row |= {f"{column}_{task}": value for column, value in verdict_columns(change).items()}
    return row | {key: effect[key] for key in EFFECT_KEYS if key in effect}


def default_table(summary: dict) -> str:
    """What ``frame()`` shows: the presses' cells, or the quantizers' in a run of quantizers only
    (an empty table would read as "nothing was measured")."""
    return "quantized" if summary["quantized"] and not summary["cells"] else "cells"


COMPRESS_TABLES = {
    "cells": cell_rows,
    "sink_effect": sink_effect_rows,
    "quantized": quantized_rows,
    "quantized_sink_effect": quantized_sink_effect_rows,
}
