"""Tables of interventions (their figures are in :mod:`.plots`): the share of attention at k and
perplexity before and after, and the trigger-model table; which experiments the figures show."""

from __future__ import annotations

from typing import Sequence

from ..core.text import format_table
from .frame import accuracy_rows


def layer_mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


INTERVENTION_COLUMNS = [
    ("intervention", "label", "s"),
    ("share at k before", "k_before", ".3f"),
    ("after", "k_after", ".3f"),
    ("share at 0 before", "0_before", ".3f"),
    ("after", "0_after", ".3f"),
    ("ppl before", "ppl_before", ".2f"),
    ("ppl after", "ppl_after", ".2f"),
]


def intervention_rows(summary: dict) -> list[dict]:
    """One row per experiment: shares at k and at 0 (means over layers) and ppl, before and after."""
    base = summary["baseline"]
    return [
        {
            "label": r["label"],
            "k_before": layer_mean(base["share_at"][str(r["k"])]),
            "k_after": layer_mean(r["share_at_k"]),
            "0_before": layer_mean(base["share_at_0"]),
            "0_after": layer_mean(r["share_at_0"]),
            "ppl_before": base["ppl"],
            "ppl_after": r["ppl"],
        }
        for r in summary["results"]
    ]


def intervention_table(summary: dict) -> str:
    return format_table(intervention_rows(summary), INTERVENTION_COLUMNS)


ACCURACY_COLUMNS = [
    ("task", "task", "s"),
    ("intervention", "experiment", "s"),
    ("n", "n", "d"),
    ("orders", "rotations", "d"),
    ("choices listed", "listed", ""),
    ("chance", "chance", ".3f"),
    ("acc intact", "acc_intact", ".3f"),
    ("edited", "acc_edited", ".3f"),
    ("change", "acc_change", "+.3f"),
    ("95% low", "acc_change_low", "+.3f"),
    ("high", "acc_change_high", "+.3f"),
    ("sign-flip p", "sign_flip_p", ".3g"),
    ("McNemar p (strict)", "mcnemar_p", ".3g"),
    ("gold logprob change", "gold_logprob_change", "+.3f"),
]


def accuracy_table(summary: dict) -> str:
    """The ``--accuracy`` verdicts: intact against each experiment, paired."""
    return format_table(list(accuracy_rows(summary)), ACCURACY_COLUMNS)


def strongest_per_kind(results: list[dict]) -> list[str]:
    """One label per intervention type: the largest lam of a sweep, else each setting."""
    best: dict[str, dict] = {}
    for r in results:
        kind = r["label"].split(" lam=")[0]
        if kind not in best or (r["lam"] or 0) > (best[kind]["lam"] or 0):
            best[kind] = r
    return [r["label"] for r in best.values()]


TRIGGER_INTERVENTION_COLUMNS = [
    ("model", "model", "s"),
    ("intervention", "intervention", "s"),
    ("MSE non-trigger before", "mse_nontrigger_before", ".2e"),
    ("after", "mse_nontrigger_after", ".2e"),
    ("MSE trigger before", "mse_trigger_before", ".2e"),
    ("after", "mse_trigger_after", ".2e"),
    ("BOS mass before", "bos_mass_nontrigger_before", ".3f"),
    ("after", "bos_mass_nontrigger_after", ".3f"),
]


def trigger_intervention_table(results: list[dict]) -> str:
    return format_table(results, TRIGGER_INTERVENTION_COLUMNS)
