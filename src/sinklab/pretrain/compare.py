"""``sinklab compare``: one table and two plots over pretraining runs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from ..core.runs import prepare_run_dir, write_json
from . import page, report
from .results import load_run, run_row


def compare_runs(run_dirs: Sequence[str], target: Optional[float], out: str) -> dict:
    runs = {d: load_run(d) for d in run_dirs}
    if target is None:
        target = max(summary["final_val_loss"] for _, summary in runs.values())
    rows = [run_row(d, summary, metrics, target) for d, (metrics, summary) in runs.items()]
    out_dir = prepare_run_dir(out)
    figures = [
        report.loss_curves({Path(d).name: metrics for d, (metrics, _) in runs.items()}, out_dir / "val_loss.png").name,
        report.first_token_mass_by_layer({Path(d).name: s["first_token_mass_by_layer"] for d, (_, s) in runs.items()}, out_dir / "first_token_mass_by_layer.png").name,
        report.emergence({Path(d).name: metrics for d, (metrics, _) in runs.items()}, out_dir / "emergence.png").name,
    ]
    result = {"target": target, "rows": rows, "by_variant": by_variant(rows), "figures": figures, "run_dirs": [str(Path(d).resolve()) for d in run_dirs]}
    write_json(out_dir / "compare.json", result)
    page.write(out_dir)
    return result


def by_variant(rows: Sequence[dict]) -> list[dict]:
    """Mean and spread over seeds of each variant's numbers."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["variant"], []).append(r)
    out = []
    for variant, rs in groups.items():
        entry = {"variant": variant, "seeds": len(rs)}
        for key in ("final_val_loss", "final_val_bpb", "tokens_per_s", "first_token_mass_mean", "sink_rate", "dominance_first_max", "kurtosis_max",
                    "max_over_median", "null_mass_mean", "value_drain_max", "residual_peak_max", "val_loss_gap", "copy_accuracy",
                    "sink_head_bos_mass_nontrigger", "sink_head_bos_mass_trigger", "steps_to_target"):
            values = [r[key] for r in rs if r[key] is not None]
            if values:
                mean = sum(values) / len(values)
                entry[key] = mean
                entry[f"{key}_spread"] = (max(values) - min(values)) / 2
        out.append(entry)
    return out
