"""A scan's summary as a tidy table: one row per (layer, head); a comparison's, one per (model, layer)."""

from __future__ import annotations

from typing import Iterator

#: (L, H) summary entries that become columns of the per-head table (where the summary has them).
HEAD_COLUMNS = ("first_token_mass", "sink_alpha", "null_mass")


def scan_rows(summary: dict) -> Iterator[dict]:
    """One row per (layer, head): ``layer``, ``head``, ``first_token_mass``, ``sink_alpha`` and
    ``is_sink`` (alpha above the summary's eps), ``null_mass`` where the model has a null slot, and
    the model, its dtype and device (so scans of several models or dtypes concatenate)."""
    columns = [key for key in HEAD_COLUMNS if summary.get(key) is not None]
    eps = summary["settings"]["eps"]
    for layer in range(summary["layers"]):
        for head in range(summary["heads"]):
            row = {"model": summary["model"], "dtype": summary.get("dtype"), "device": summary.get("device"), "layer": layer, "head": head}
            row.update({key: summary[key][layer][head] for key in columns})
            if "sink_alpha" in row:
                row["is_sink"] = row["sink_alpha"] is not None and row["sink_alpha"] > eps
            yield row


def compare_rows(summary: dict) -> Iterator[dict]:
    """A comparison's (``sinklab scan MODEL MODEL ...``) table: one row per (model, layer) with
    ``model``, ``layer`` and ``first_token_mass`` (the layer's mean over heads)."""
    for entry in summary["models"]:
        for layer, mass in enumerate(entry["first_token_mass_by_layer"]):
            yield {"model": entry["model"], "layer": layer, "first_token_mass": mass}
