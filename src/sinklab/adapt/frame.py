"""An adapt run's summary as a tidy table: one row per (setting, condition)."""

from __future__ import annotations

from typing import Iterator

from ..core.results import table_rows


def adapt_rows(summary: dict) -> Iterator[dict]:
    """Rows with ``setting`` (``fp`` or a quantization scheme), ``condition`` (``bos``, ``prefix``,
    ``no_bos``, ``cushion``, or ``adapted`` after fine-tuning), its ``ppl`` and the largest |input|
    of any linear layer under it (``max_abs_activation``)."""
    return table_rows(summary, _rows(summary))


def _rows(summary: dict) -> Iterator[dict]:
    maxima = summary.get("max_abs_activation", {})
    for setting, by_condition in summary["ppl"].items():
        for condition, ppl in by_condition.items():
            layers = maxima.get(setting, {}).get(condition)
            yield {"setting": setting, "condition": condition, "ppl": ppl, "max_abs_activation": max(layers) if layers else None}


ADAPT_TABLES = {"perplexity": adapt_rows}
