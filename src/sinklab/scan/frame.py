"""A scan's summary as tidy tables (``RunResult.frame(name)``): per (layer, head), per layer, the
massive activations and the super neurons; a comparison's, per (model, layer). Every row starts
with the model, its dtype and its device, so tables of several scans concatenate."""

from __future__ import annotations

from typing import Iterator

from ..core.results import table_rows

#: (L, H) summary entries that become columns of the per-head table (where the summary has them).
HEAD_COLUMNS = ("first_token_mass", "sink_alpha", "null_mass")
#: Per-layer summary entries that become columns of the per-layer table (where the summary has them).
LAYER_COLUMNS = (
    "first_token_mass_by_layer",
    "sink_share_by_layer",
    "dominance_ratio_first",
    "dominance_ratio_rest",
    "max_abs_first",
    "max_abs_rest",
    "max_over_median",
    "kurtosis",
)


def head_rows(summary: dict) -> Iterator[dict]:
    """One row per (layer, head): ``first_token_mass`` (the mean attention weight that queries from
    ``min_query`` on give to position 0: a fraction of their attention, in [0, 1], averaged over
    those queries and the sequences), ``sink_alpha`` (Gu et al.'s alpha at the Sink_k key, in
    [0, 1]), ``is_sink`` (alpha above the summary's eps) and ``null_mass`` where the model has a
    null slot."""
    columns = [key for key in HEAD_COLUMNS if summary.get(key) is not None]
    eps = summary["settings"]["eps"]
    rows = []
    for layer in recorded_layers(summary):
        for head in range(summary["heads"]):
            row = {"layer": layer, "head": head, **{key: summary[key][layer][head] for key in columns}}
            if "sink_alpha" in row:
                row["is_sink"] = row["sink_alpha"] is not None and row["sink_alpha"] > eps
            rows.append(row)
    return table_rows(summary, rows)


def layer_rows(summary: dict) -> Iterator[dict]:
    """One row per layer: the per-layer figures (first-token mass and sink share averaged over heads;
    the dominance ratio max|h| / mean|h| of the residual stream at position 0 and elsewhere; the
    largest |h| there; max|h| over the median |h|; the kurtosis of the residual stream)."""
    columns = [key for key in LAYER_COLUMNS if summary.get(key) is not None]
    return table_rows(
        summary, ({"layer": layer, **{key: summary[key][layer] for key in columns}} for layer in recorded_layers(summary))
    )


def recorded_layers(summary: dict) -> list[int]:
    """The layers a scan recorded (``--layers``; every layer by default): the rows its tables have."""
    return summary.get("recorded_layers") or list(range(summary["layers"]))


def massive_rows(summary: dict) -> Iterator[dict]:
    """One row per massive activation (Sun et al. 2024): ``layer``, ``position``, ``dim``, its
    ``value`` (the residual stream's entry, in the model's units) and in how many ``sequences``."""
    return table_rows(summary, summary["massive_activations"])


def super_neuron_rows(summary: dict) -> Iterator[dict]:
    """One row per super neuron (Li et al. 2026): ``layer``, ``neuron`` (the FFN's hidden unit),
    ``act_first`` (mean |a| at position 0), ``act_rest_mean`` (elsewhere), their ``ratio``."""
    keys = ("layer", "neuron", "act_first", "act_rest_mean", "ratio")
    return table_rows(summary, ({key: n[key] for key in keys if key in n} for n in summary["super_neurons"]))


SCAN_TABLES = {"heads": head_rows, "layers": layer_rows, "massive_activations": massive_rows, "super_neurons": super_neuron_rows}


def compare_rows(summary: dict) -> Iterator[dict]:
    """A comparison's (``sinklab scan MODEL MODEL ...``, ``sinklab.scan_models``) table: one row per
    (model, layer) with the model's name, dtype and device, the ``label`` the user gave it, and
    ``first_token_mass`` (the layer's mean over heads)."""
    for entry in summary["models"]:
        for layer, mass in enumerate(entry["first_token_mass_by_layer"]):
            yield {
                "model": entry["model"],
                "dtype": entry.get("dtype"),
                "device": entry.get("device"),
                "label": entry["label"],
                "layer": layer,
                "first_token_mass": mass,
            }


COMPARE_TABLES = {"layers": compare_rows}
