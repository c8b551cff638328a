"""``sinklab compare``: one table and two plots over pretraining runs."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Optional, Sequence

from ..core.figures import save_images
from ..core.runs import prepare_run_dir, write_json
from . import page, plots
from .results import load_run, run_row


def compare_runs(run_dirs: Sequence[str], target: Optional[float], out: str) -> dict:
    runs = {d: load_run(d) for d in run_dirs}
    if target is None:
        target = max(summary["final_val_loss"] for _, summary in runs.values())
    rows = [run_row(d, summary, metrics, target) for d, (metrics, summary) in runs.items()]
    out_dir = prepare_run_dir(out)
    figures = plots.compare_figures({Path(d).name: metrics for d, (metrics, _) in runs.items()}, {Path(d).name: s for d, (_, s) in runs.items()})
    result = {"target": target, "rows": rows, "by_variant": by_variant(rows), "paired": paired_comparison(rows),
              **save_images(figures, out_dir).summary_entries(), "run_dirs": [str(Path(d).resolve()) for d in run_dirs]}
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


#: The sink numbers a mitigation verdict rests on, compared seed by seed against the baseline.
PAIRED_KEYS = ("first_token_mass_mean", "sink_rate", "sink_head_bos_mass_nontrigger", "final_val_loss")


def paired_comparison(rows: Sequence[dict], baseline: str = "softmax", keys: Sequence[str] = PAIRED_KEYS) -> list[dict]:
    """Every other variant against ``baseline`` on the seeds both ran: per key the differences
    (variant - baseline) seed by seed, their mean and standard deviation, the paired t statistic
    and the exact two-sided sign-flip p-value (every one of the 2^n sign patterns of the
    differences; no normality assumed, which a handful of seeds cannot check). Empty without the
    baseline or with fewer than two shared seeds."""
    by_seed = {(r["variant"], r["seed"]): r for r in rows}
    variants = sorted({r["variant"] for r in rows} - {baseline})
    out = []
    for variant in variants:
        seeds = sorted(s for v, s in by_seed if v == variant and (baseline, s) in by_seed)
        compared = {}
        for key in keys:
            diffs = [by_seed[variant, s][key] - by_seed[baseline, s][key] for s in seeds
                     if by_seed[variant, s].get(key) is not None and by_seed[baseline, s].get(key) is not None]
            if len(diffs) >= 2:
                compared[key] = paired_statistics(diffs)
        if compared:
            out.append({"variant": variant, "baseline": baseline, "seeds": seeds, **compared})
    return out


def paired_statistics(diffs: Sequence[float]) -> dict:
    """Mean, standard deviation, t = mean / (sd / sqrt(n)) and the exact sign-flip p-value of paired differences."""
    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    observed = abs(sum(diffs))
    flips = [abs(sum(s * d for s, d in zip(signs, diffs))) for signs in itertools.product((1, -1), repeat=n)]
    p_value = sum(f >= observed - 1e-12 for f in flips) / len(flips)
    return {"diffs": list(diffs), "mean": mean, "sd": sd, "t": mean / (sd / math.sqrt(n)) if sd > 0 else None, "p_sign_flip": p_value}
