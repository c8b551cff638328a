"""The tables of a pretraining sweep (results page 4), printed from a row of
``results/<name>.jsonl`` written by ``pretrain_sweep.py``, so each figure on the page can be
checked against the row it came from.

Printed: the sink head's BOS mass at non-trigger rows per seed (Bigram-Backcopy; text runs have no
sink head, no task optimum and no copy: their first group shows the validation loss instead); each
variant's means over seeds; each variant against softmax seed by seed (mean difference, exact
sign-flip p, how many seeds moved which way); and first, what the softmax baseline itself loses
under each quantization scheme (its per-seed penalties tested against zero),
since a mitigation can only pay off where the baseline loses something.

Run: `.venv/bin/python benchmarks/sweep_table.py bb_survey_mitigations`
"""

from __future__ import annotations

from typing import Sequence

from last_row import last_row

from sinklab.pretrain.compare import paired_statistics
from sinklab.pretrain.quantization import PAYOFF_SCHEMES

BASELINE = "softmax"
#: The bar a seed's sink head must reach to count as a sink (results page 4).
SINK_BAR = 0.8
#: (column, key, format) of the means and paired tables, in the groups the page prints as one
#: table each (all fifteen side by side are too wide to read).
COLUMN_GROUPS = {
    "the task and the sink": (
        ("gap to optimum", "val_loss_gap", ".4f"),
        ("copy acc", "copy_accuracy", ".3f"),
        ("sink head BOS, non-trigger", "sink_head_bos_mass_nontrigger", ".2f"),
        ("trigger", "sink_head_bos_mass_trigger", ".3f"),
        ("first-token mass", "first_token_mass_mean", ".3f"),
        ("Sink_1^0.3", "sink_rate", ".2f"),
    ),
    "outliers, values and sparsity": (
        ("kurtosis (max)", "kurtosis_max", ".1f"),
        ("largest abs h", "largest_activation", ".2f"),
        ("max/median abs h", "max_over_median", ".0f"),
        ("aggregated value norm pos 0 / rest (max)", "value_drain_max", ".2f"),
        ("value state pos 0 / rest, before any gate (max)", "value_state_drain_max", ".2f"),
        ("zero weights", "attention_zero_share_mean", ".3f"),
    ),
    "the quantization payoff": tuple((f"{name} +loss", f"quant_{name}", ".4f") for name in PAYOFF_SCHEMES),
}
COLUMNS = tuple(column for group in COLUMN_GROUPS.values() for column in group)
#: Natural text has no task optimum, copy or sink head (those four columns are Bigram-Backcopy's):
#: the validation loss stands for the task.
TEXT_COLUMN_GROUPS = {
    **COLUMN_GROUPS,
    "the task and the sink": (("val loss", "final_val_loss", ".3f"), *COLUMN_GROUPS["the task and the sink"][4:]),
}


def column_groups(corpus: str) -> dict:
    """The column groups of a row's corpus (a row that records none is from the Bigram-Backcopy sweeps)."""
    return COLUMN_GROUPS if corpus in ("bb", "not recorded") else TEXT_COLUMN_GROUPS


def by_seed(rows: list[dict]) -> dict[str, dict[int, dict]]:
    """variant -> seed -> run row."""
    out: dict[str, dict[int, dict]] = {}
    for r in rows:
        out.setdefault(r["variant"], {})[r["seed"]] = r
    return out


def cell(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def sink_table(runs: dict[str, dict[int, dict]]) -> list[str]:
    seeds = sorted({s for per in runs.values() for s in per})
    lines = [
        f"| variant | seeds {' / '.join(map(str, seeds))} | mean | seeds >= {SINK_BAR} |",
        "|---|---|---:|---:|",
    ]
    for variant, per in runs.items():
        values = [per[s].get("sink_head_bos_mass_nontrigger") if s in per else None for s in seeds]
        known = [v for v in values if v is not None]
        if not known:
            continue
        sinks = sum(v >= SINK_BAR for v in known)
        mean = sum(known) / len(known)
        lines.append(f"| {variant} | {' / '.join(cell(v, '.2f') for v in values)} | {mean:.2f} | {sinks} of {len(known)} |")
    return lines


def means_table(runs: dict[str, dict[int, dict]], columns: Sequence[tuple[str, str, str]] = COLUMNS) -> list[str]:
    lines = ["| variant | seeds | " + " | ".join(c for c, _, _ in columns) + " |", "|---|---:|" + "---:|" * len(columns)]
    for variant, per in runs.items():
        cells = []
        for _, key, fmt in columns:
            values = [r[key] for r in per.values() if r.get(key) is not None]
            cells.append(cell(sum(values) / len(values) if values else None, fmt))
        lines.append(f"| {variant} | {len(per)} | " + " | ".join(cells) + " |")
    return lines


def paired_cell(diffs: list[float], fmt: str) -> str:
    if len(diffs) < 2:
        return "-"
    stats = paired_statistics(diffs)
    lower = sum(d < 0 for d in diffs)
    return f"{format(stats['mean'], '+' + fmt)} (p {stats['p_sign_flip']:.3f}; lower in {lower} of {len(diffs)})"


def paired_table(runs: dict[str, dict[int, dict]], columns: Sequence[tuple[str, str, str]] = COLUMNS) -> list[str]:
    base = runs.get(BASELINE, {})
    lines = ["| variant - softmax | " + " | ".join(c for c, _, _ in columns) + " |", "|---|" + "---|" * len(columns)]
    for variant, per in runs.items():
        if variant == BASELINE:
            continue
        cells = []
        for _, key, fmt in columns:
            shared = [s for s in per if s in base and per[s].get(key) is not None and base[s].get(key) is not None]
            cells.append(paired_cell([per[s][key] - base[s][key] for s in sorted(shared)], fmt))
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return lines


def baseline_payoff(runs: dict[str, dict[int, dict]]) -> list[str]:
    """What softmax loses under each scheme: its per-seed penalty (quantized loss minus full
    precision, on the same validation batches) tested against zero, beside its gap to the optimum."""
    base = list(runs.get(BASELINE, {}).values())
    gap = [r["val_loss_gap"] for r in base if r.get("val_loss_gap") is not None]
    lines = [
        "| scheme | softmax penalty: mean (min to max) | sign-flip p against 0 | mean gap to optimum |",
        "|---|---|---:|---:|",
    ]  # gap "-" on natural text, which has no known optimum
    for name in PAYOFF_SCHEMES:
        penalties = [r[f"quant_{name}"] for r in base if r.get(f"quant_{name}") is not None]
        if len(penalties) < 2:
            continue
        stats = paired_statistics(penalties)
        lines.append(
            f"| {name} | {stats['mean']:+.5f} ({min(penalties):+.5f} to {max(penalties):+.5f}) | "
            f"{stats['p_sign_flip']:.3f} | {cell(sum(gap) / len(gap) if gap else None, '.4f')} |"
        )
    return lines


def main() -> None:
    row = last_row(__doc__)
    runs = by_seed(row["rows"])
    corpus, overrides = row.get("corpus", "not recorded"), row.get("overrides", "not recorded")
    print(f"commit {row['git']}, corpus {corpus}, {row['steps']} steps, settings {overrides}\n")
    groups = column_groups(corpus)
    tables = [("What the softmax baseline loses under quantization", baseline_payoff(runs))]
    if groups is COLUMN_GROUPS:  # only Bigram-Backcopy has a sink head
        tables.append(("The sink head's BOS mass at non-trigger rows, per seed", sink_table(runs)))
    for group, columns in groups.items():
        tables.append((f"Means over seeds: {group}", means_table(runs, columns)))
        tables.append((f"Paired by seed against softmax: {group}", paired_table(runs, columns)))
    for title, lines in tables:
        print(f"{title}\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
