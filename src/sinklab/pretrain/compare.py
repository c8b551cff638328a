"""``sinklab compare``: one table and two plots over pretraining runs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from ..core.configs import setting
from ..core.errors import check
from ..core.results import Capability, RunContext, RunResult, register, stamped, table_rows
from ..core.stats import sign_flip_p
from . import page, plots
from .quantization import PAYOFF_SCHEMES
from .results import load_run, run_row


@dataclass
class CompareRunsConfig:
    """Pretraining runs compared (``sinklab compare``); ``target``: the validation loss for
    "steps to target" (None: the worst final loss)."""

    runs: tuple[str, ...] = setting((), help="run directories of sinklab pretrain", cli=False)
    target: Optional[float] = setting(None, help="validation loss for 'steps to target' (default: the worst final loss)")

    def __post_init__(self) -> None:
        self.runs = tuple(str(Path(d).resolve()) for d in self.runs)
        check(bool(self.runs), "give at least one pretraining run directory")


def measure(cfg: CompareRunsConfig, context: RunContext = RunContext()) -> RunResult:
    """The table over runs, by variant, and each variant against softmax seed by seed; as data,
    each run's metrics rows (the curves the figures draw)."""
    runs = {d: load_run(d) for d in cfg.runs}
    target = cfg.target if cfg.target is not None else max(summary["final_val_loss"] for _, summary in runs.values())
    rows = [run_row(d, summary, metrics, target) for d, (metrics, summary) in runs.items()]
    summary = {
        "target": target,
        "rows": rows,
        "by_variant": by_variant(rows),
        "paired": paired_comparison(rows),
        "run_dirs": list(cfg.runs),
    }
    data = {
        "metrics": {Path(d).name: metrics for d, (metrics, _) in runs.items()},
        "summaries": {Path(d).name: s for d, (_, s) in runs.items()},
    }
    return RunResult(stamped(KIND, summary), data)


KIND = "pretrain-compare"


def figures(result: RunResult) -> dict:
    """The loss and sink curves against the step and the first-token mass by layer, one line per run."""
    return plots.compare_figures(result.data["metrics"], result.data["summaries"])


COMPARE_RUNS = register(
    Capability(
        KIND,
        CompareRunsConfig,
        measure,
        lambda out, result: [],
        tables={"runs": lambda s: s["rows"], "by_variant": lambda s: table_rows(s, s["by_variant"])},
        write_page=page.write,
        figures=figures,
    )
)


#: The columns of the outlier papers' claims: the largest activation, attention sparsity, and the
#: validation-loss penalty of each quantization scheme of :data:`~.quantization.PAYOFF_SCHEMES`.
OUTLIER_KEYS = ("largest_activation", "attention_zero_share_mean", *(f"quant_{name}" for name in PAYOFF_SCHEMES))


def by_variant(rows: Sequence[dict]) -> list[dict]:
    """Mean and spread over seeds of each variant's numbers."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["variant"], []).append(r)
    out = []
    for variant, rs in groups.items():
        entry = {"variant": variant, "seeds": len(rs)}
        for key in (
            "final_val_loss",
            "final_val_bpb",
            "tokens_per_s",
            "first_token_mass_mean",
            "sink_rate",
            "dominance_first_max",
            "kurtosis_max",
            "max_over_median",
            "null_mass_mean",
            "value_drain_max",
            "value_state_drain_max",
            "residual_peak_max",
            "val_loss_gap",
            "copy_accuracy",
            "sink_head_bos_mass_nontrigger",
            "sink_head_bos_mass_trigger",
            "steps_to_target",
            *OUTLIER_KEYS,
        ):
            values = [r[key] for r in rs if r[key] is not None]
            if values:
                mean = sum(values) / len(values)
                entry[key] = mean
                entry[f"{key}_spread"] = (max(values) - min(values)) / 2
        out.append(entry)
    return out


#: The sink numbers a mitigation verdict rests on, compared seed by seed against the baseline: the
#: sink, the task (Bigram-Backcopy's gap to the optimum and copy accuracy, None on text), and the
#: outliers and quantization penalties the training mitigations claim to remove (issue 52).
PAIRED_KEYS = (
    "first_token_mass_mean",
    "sink_rate",
    "sink_head_bos_mass_nontrigger",
    "sink_head_bos_mass_trigger",
    "final_val_loss",
    "val_loss_gap",
    "copy_accuracy",
    "kurtosis_max",
    "value_drain_max",
    "value_state_drain_max",
    *OUTLIER_KEYS,
)


def paired_comparison(rows: Sequence[dict], baseline: str = "softmax", keys: Sequence[str] = PAIRED_KEYS) -> list[dict]:
    """Every other variant against ``baseline`` on the seeds both ran: per key the differences
    (variant - baseline) seed by seed, their mean and standard deviation, the paired t statistic
    and the two-sided sign-flip p-value (:func:`~sinklab.core.stats.sign_flip_p`: every one of the
    2^n sign patterns up to 16 seeds; no normality assumed, which a handful of seeds cannot check). Empty without the
    baseline or with fewer than two shared seeds."""
    by_seed = {(r["variant"], r["seed"]): r for r in rows}
    variants = sorted({r["variant"] for r in rows} - {baseline})
    out = []
    for variant in variants:
        seeds = sorted(s for v, s in by_seed if v == variant and (baseline, s) in by_seed)
        compared = {}
        for key in keys:
            diffs = [
                by_seed[variant, s][key] - by_seed[baseline, s][key]
                for s in seeds
                if by_seed[variant, s].get(key) is not None and by_seed[baseline, s].get(key) is not None
            ]
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
    p_value = sign_flip_p(diffs)
    return {
        "diffs": list(diffs),
        "mean": mean,
        "sd": sd,
        "t": mean / (sd / math.sqrt(n)) if sd > 0 else None,
        "p_sign_flip": p_value,
    }
