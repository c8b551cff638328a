"""Reading finished pretraining runs and their one-line summaries (the comparison table)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

from ..core.atomic import read_jsonl
from ..core.errors import SinklabError
from ..core.results import model_columns
from ..core.runs import read_run_info
from .quantization import PAYOFF_SCHEMES

COLUMNS = [
    ("run", "run", "s"),
    ("variant", "variant", "s"),
    ("seed", "seed", "d"),
    ("threads", "threads", ""),
    ("final val loss", "final_val_loss", ".3f"),
    ("val bpb", "final_val_bpb", ".3f"),
    ("steps to target", "steps_to_target", ""),
    ("tokens/s", "tokens_per_s", ".0f"),
    ("first-token mass", "first_token_mass_mean", ".3f"),
    ("Sink_1^0.3", "sink_rate", ".2f"),
    ("dominance pos0 (max)", "dominance_first_max", ".1f"),
    ("massive acts", "massive", "d"),
    ("max/median |h|", "max_over_median", ".0f"),
    ("null mass", "null_mass_mean", ".3f"),
    ("value drain (max)", "value_drain_max", ".2f"),
    ("value state pos0 / rest (max)", "value_state_drain_max", ".2f"),
    ("residual peak (max)", "residual_peak_max", ".1f"),
    ("kurtosis (max)", "kurtosis_max", ".1f"),
    ("largest |h|", "largest_activation", ".1f"),
    ("zero weights", "attention_zero_share_mean", ".3f"),
    ("W8A8 per-tensor static +loss", "quant_w8a8_tensor_static", ".3f"),
    ("W8A8 static +loss", "quant_w8a8_static", ".3f"),
    ("W4A8 +loss", "quant_w4a8", ".3f"),
    ("W4 +loss", "quant_w4", ".3f"),
    ("gap to optimum", "val_loss_gap", ".3f"),
    ("copy acc", "copy_accuracy", ".3f"),
    ("sink head BOS non-trig", "sink_head_bos_mass_nontrigger", ".3f"),
    ("trig", "sink_head_bos_mass_trigger", ".3f"),
]


def load_run(run_dir: str) -> tuple[list[dict], dict]:
    """(metrics rows, summary) of a finished pretraining run, with clear errors otherwise."""
    path = Path(run_dir)
    if not (path / "metrics.jsonl").exists():
        raise SinklabError(f"{run_dir} is not a pretraining run (no metrics.jsonl)")
    if not (path / "summary.json").exists():
        raise SinklabError(
            f"{run_dir} has not finished (no summary.json); "
            "resume it by running the command that started it again (its run.json records it)"
        )
    return read_jsonl(path / "metrics.jsonl"), json.loads((path / "summary.json").read_text())


def steps_to(rows: Sequence[dict], target: float) -> Optional[int]:
    """First evaluated step whose validation loss is at or below ``target``."""
    return next((r["step"] for r in rows if r["val_loss"] <= target), None)


def run_row(run_dir: str, summary: dict, rows: Optional[Sequence[dict]] = None, target: Optional[float] = None) -> dict:
    """A run's line in ``sinklab compare``: its model, dtype and device (so the tables of runs
    trained apart concatenate), its variant, seed and torch threads (run.json's: the float order a chaotic
    training's outcome depends on), final losses, speed and sink figures."""
    return {
        **model_columns(summary),
        "run": Path(run_dir).name,
        "variant": summary["variant"],
        "seed": summary["seed"],
        "threads": read_run_info(run_dir).get("machine", {}).get("torch_threads"),
        "final_val_loss": summary["final_val_loss"],
        "final_val_bpb": summary["final_val_bpb"],
        "steps_to_target": steps_to(rows, target) if rows is not None and target is not None else None,
        "tokens_per_s": summary["tokens_per_s"],
        **sink_figures(summary),
        **{
            k: summary.get(k)
            for k in ("val_loss_gap", "copy_accuracy", "sink_head_bos_mass_nontrigger", "sink_head_bos_mass_trigger")
        },
        **{f"quant_{name}": penalty(summary, name) for name in PAYOFF_SCHEMES},
    }


def penalty(summary: dict, scheme: str) -> Optional[float]:
    """The validation-loss penalty of ``scheme`` (None for a run from before it was measured)."""
    return summary.get("quantization", {}).get("loss_penalty", {}).get(scheme)


def sink_figures(scan: dict) -> dict:
    """The one-number summaries of a native scan (``scan_native`` or a run's summary) that the
    comparison table and the per-evaluation curves show."""
    by_layer = scan["first_token_mass_by_layer"]
    kurtosis = [k for k in scan["kurtosis"] if k is not None]
    triad = scan.get("extreme_token_triad")
    return {
        "first_token_mass_mean": sum(by_layer) / len(by_layer),
        "sink_rate": scan["sink_rate"]["value"],
        "dominance_first_max": max(scan["dominance_ratio_first"]),
        "massive": len(scan["massive_activations"]),
        "kurtosis_max": max(kurtosis) if kurtosis else None,
        "max_over_median": max(scan["max_over_median"]) if "max_over_median" in scan else None,
        "null_mass_mean": _mean_all(scan["null_mass"]) if "null_mass" in scan else 0.0,
        "value_drain_max": max(triad["value_drain"]) if triad else None,
        "value_state_drain_max": max(scan["value_state_drain"]) if "value_state_drain" in scan else None,
        "residual_peak_max": max(triad["residual_peak"]) if triad else None,
        "largest_activation": max(v for v in [*scan["max_abs_first"], *scan.get("max_abs_rest", [])] if v is not None),
        "attention_zero_share_mean": _mean_all(scan["attention_zero_share"]) if "attention_zero_share" in scan else None,
    }


def _mean_all(rows: list[list[float]]) -> float:
    values = [v for row in rows for v in row]
    return sum(values) / len(values)


#: The sink metrics written at every evaluation and, at the end, into summary.json under the same
#: names and types (metrics.jsonl key -> sink_figures key). Scalars only: summary.json's
#: ``first_token_mass`` (L, H) and ``sink_rate`` (a dict) keep their own names for their own shapes.
EMERGENCE = {
    "first_token_mass_mean": "first_token_mass_mean",
    "sink_rate_value": "sink_rate",
    "dominance_first_max": "dominance_first_max",
    "null_mass_mean": "null_mass_mean",
    "value_drain_max": "value_drain_max",
    "residual_peak_max": "residual_peak_max",
}


def emergence_figures(scan: dict) -> dict:
    """The :data:`EMERGENCE` scalars of a native scan."""
    figures = sink_figures(scan)
    return {key: figures[name] for key, name in EMERGENCE.items()}
