"""Terminal tables of ``sinklab adapt`` runs (their figures are in :mod:`.plots`)."""

from __future__ import annotations

from ..core.text import format_table, safe_text

CONDITION_LABELS = {
    "bos": "BOS in the stream",
    "prefix": "BOS as cached prefix",
    "no_bos": "no BOS",
    "cushion": "searched prefix",
    "adapted": "adapted, no BOS",
}

BEFORE_AFTER = [
    ("first-token mass", "first_token_mass"),
    ("Sink_1^0.3", "sink_rate"),
    ("slot mass", "slot_mass"),
    ("largest |residual|", "max_abs_residual"),
]


#: The summary's perplexity tables: held-out text of the adaptation corpus, and (fine-tuning) text of another domain.
PPL_PARTS = {"": "held-out text", "_outside": "text of another domain"}


def ppl_rows(summary: dict, part: str = "") -> list[dict]:
    """One row per setting: perplexity per condition and the largest linear input per condition;
    ``part`` "_outside" reads the fine-tuning run's evaluation outside its corpus."""
    rows = []
    for setting, by_condition in summary[f"ppl{part}"].items():
        row = {"setting": setting}
        for condition, value in by_condition.items():
            row[f"ppl {condition}"] = value
            row[f"max {condition}"] = max(summary[f"max_abs_activation{part}"][setting][condition])
        rows.append(row)
    return rows


def ppl_columns(summary: dict) -> list[tuple[str, str, str]]:
    conditions = list(next(iter(summary["ppl"].values())))
    columns = [("setting", "setting", "s")]
    columns += [(f"ppl, {CONDITION_LABELS.get(c, c)}", f"ppl {c}", ".2f") for c in conditions]
    return columns + [(f"max |x|, {c}", f"max {c}", ".0f") for c in conditions]


def ppl_table(summary: dict) -> str:
    """Every perplexity table the summary holds, each under its title."""
    parts = [p for p in PPL_PARTS if f"ppl{p}" in summary]
    titles = {p: PPL_PARTS[p] + (f" ({safe_text(summary['outside_corpus'], 40)})" if p else "") for p in parts}
    return "\n\n".join(f"perplexity on {titles[p]}:\n" + format_table(ppl_rows(summary, p), ppl_columns(summary)) for p in parts)


def headline(summary: dict) -> str:
    lines = []
    if "exact_check" in summary:
        lines.append(
            f"prefix exactness: max |logit difference| {summary['exact_check']:.1e} against the same tokens in the sequence"
        )
    if "search" in summary:
        strings = ", ".join(repr(safe_text(s, 12)) for s in summary["search"]["strings"])
        lines.append(
            f"searched prefix: [{strings}] "
            f"({summary['search']['evaluated']} candidates tried in {summary['search']['seconds']:.0f} s)"
        )
    return "\n".join(lines)


def before_after_rows(summary: dict) -> list[dict]:
    """The sink metrics of the original (BOS in the stream) and the adapted model (no BOS)."""
    before, after = summary["before"], summary["after"]
    rows = [{"metric": label, "before": before[key], "after": after[key]} for label, key in BEFORE_AFTER]
    for b, a in zip(before["super_neurons"], after["super_neurons"]):
        name = f"super neuron {b['layer']}.{b['neuron']}"
        rows.append({"metric": f"{name}, |a| at the first token", "before": b["act_first"], "after": a["act_first"]})
        rows.append({"metric": f"{name}, largest |a|", "before": b["act_max"], "after": a["act_max"]})
    for setting, by_condition in summary["ppl"].items():
        rows.append({"metric": f"perplexity, {setting}", "before": by_condition["bos"], "after": by_condition["adapted"]})
    return rows


BEFORE_AFTER_COLUMNS = [("metric", "metric", "s"), ("original, BOS", "before", ".4g"), ("adapted, no BOS", "after", ".4g")]


def before_after_table(summary: dict) -> str:
    head = f"{summary['mitigation']}: {summary['steps']} steps, step-0 max |logit difference| {summary['exact_check']:.1e}"
    return head + "\n" + format_table(before_after_rows(summary), BEFORE_AFTER_COLUMNS)
