"""A compression run's summary as tidy tables: one row per cell of the keep-sink table, and one
per paired comparison with the sinks kept against none."""

from __future__ import annotations

from typing import Iterator

from ..core.results import table_rows


def cell_rows(summary: dict) -> Iterator[dict]:
    """One row per (press, ratio, keep_sinks, context): ``ppl_<text>`` (perplexity of the
    continuation through the compressed cache), ``ppl_ratio_<text>`` (against the full cache's:
    1 is no loss), ``passkey_accuracy`` (a fraction of the prompts, in [0, 1]),
    ``key_logprob`` (the true key's log-probability, nats, mean over prompts), ``kept_fraction``
    (of the context's keys, per compressed layer and head) and ``bytes_ratio`` (the whole cache's
    bytes against the dense cache's)."""
    return table_rows(summary, (_flat(cell) for cell in summary["cells"]))


def _flat(cell: dict) -> dict:
    row = {key: cell[key] for key in ("press", "ratio", "keep_sinks", "context")}
    row |= {f"ppl_{text}": value for text, value in cell.get("ppl", {}).items()}
    row |= {f"ppl_ratio_{text}": value for text, value in cell.get("ppl_ratio", {}).items()}
    if "passkey" in cell:
        row |= {"passkey_accuracy": cell["passkey"]["accuracy"], "key_logprob": cell["passkey"]["logprob_mean"]}
    return row | {"kept_fraction": cell["kept_fraction"], "bytes_ratio": cell["bytes_ratio"]}


def sink_effect_rows(summary: dict) -> Iterator[dict]:
    """One row per (press, ratio, context, keep_sinks other than 0): ``ppl_change_<text>`` (the
    relative change of perplexity against keeping no sink: -0.1 is 10 % lower), ``accuracy_change``
    (passkey accuracy, in fractions) and ``logprob_change`` (nats)."""

    def flat(effect: dict) -> dict:
        row = {key: effect[key] for key in ("press", "ratio", "context", "keep_sinks")}
        row |= {f"ppl_change_{text}": value for text, value in effect.get("ppl_change", {}).items()}
        return row | {key: effect[key] for key in ("accuracy_change", "logprob_change") if key in effect}

    return table_rows(summary, (flat(effect) for effect in summary["sink_effect"]))


COMPRESS_TABLES = {"cells": cell_rows, "sink_effect": sink_effect_rows}
