"""The keep-sink table's figures from the jobs' per-input scores: one cell's perplexity, passkey
accuracy and key log-probabilities at one context, its multiple-choice accuracy (``choice``, per
task: lm-eval's figures with the per-example lists a paired verdict reads; the shots are its
context, so every context's cell holds the same), against the full cache's, and the paired
comparison of each kept-sink setting against keeping none (the same inputs, prompt by prompt)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from ..accuracy import Scored, verdict

#: The compress summary's schema: 3 holds presses' and quantizers' cells in one list (``cells``,
#: ``sink_effect``); 2 held the quantizers' apart (``quantized``, ``quantized_sink_effect``), under
#: their own names (``quantizer``, ``protect``), and named a press ``press`` (:func:`current` reads it).
SCHEMA_VERSION = 4  # 4: multiple-choice scores asked under every order of the choices (rotations), the gold log-probability
#: What tells a cell's paired comparisons apart: the policy and its level, at one context.
CELL_GROUP = ("policy", "kind", "ratio", "bits", "context")


def current(summary: dict) -> dict:
    """``summary`` in today's schema: a version-2 summary (a run directory written before the two
    families shared one cell schema) with its quantizers' cells and effects moved into ``cells``
    and ``sink_effect``; today's as it is."""
    if "quantized" not in summary:
        return summary

    def press(entry: dict) -> dict:
        rest = {k: v for k, v in entry.items() if k != "press"}
        return {"policy": entry["press"], "kind": "press", "ratio": entry["ratio"], "bits": None, **rest}

    def quantizer(entry: dict) -> dict:
        rest = {k: v for k, v in entry.items() if k not in ("quantizer", "protect")}
        return {"policy": entry["quantizer"], "kind": "quantizer", "ratio": None, **rest, "keep_sinks": entry["protect"]}

    older = {k: v for k, v in summary.items() if k not in ("quantized", "quantized_sink_effect")}
    return {
        **older,
        "cells": [*map(press, summary["cells"]), *map(quantizer, summary["quantized"])],
        "sink_effect": [*map(press, summary["sink_effect"]), *map(quantizer, summary["quantized_sink_effect"])],
    }


def cell_figures(rows: dict, context: int, cell: str, dense: dict) -> dict:
    """:func:`task_figures`, and the perplexity against the full cache's (``dense``, per context)."""
    figures = task_figures(rows, context, cell)
    return {**figures, **relative(figures, dense[str(context)])}


def task_figures(rows: dict, context: int, cell: str) -> dict:
    """One cell's figures at one context: ppl per text, passkey accuracy (overall and per depth),
    the true key's log-probability (mean, spread, and per prompt in the prompts' order, for paired
    differences) and rank, the kept fraction, the bytes kept and the sinks detected (per input)."""
    mine = {name.split("|", 1)[1]: by_cell[cell] for name, by_cell in rows.items() if name.startswith(f"{context}|")}
    texts = {name[4:]: s for name, s in mine.items() if name.startswith("ppl:")}
    keys = [(name.split(":")[1], s) for name, s in mine.items() if name.startswith("passkey:")]
    every = list(mine.values())
    choice = {name.split(":", 1)[1]: by_cell[cell] for name, by_cell in rows.items() if name.startswith("accuracy:")}
    out = {
        "kept_fraction": statistics.fmean(s["kept_fraction"] for s in every) if every else None,
        "bytes_ratio": statistics.fmean(s["bytes_ratio"] for s in every) if every else None,
        "sinks": sorted({tuple(s["sinks"]) for s in every}),
    }
    if choice:
        out["choice"] = choice
    if texts:
        out["ppl"] = {text: math.exp(s["nll"]) for text, s in texts.items()}
    if keys:
        logprobs = [s["logprob"] for _, s in keys]
        by_depth = defaultdict(list)
        for depth, s in keys:
            by_depth[depth].append(s["correct"])
        out["passkey"] = {
            "accuracy": statistics.fmean(s["correct"] for _, s in keys),
            "accuracy_by_depth": {d: statistics.fmean(v) for d, v in by_depth.items()},
            "logprob_mean": statistics.fmean(logprobs),
            "logprob_std": statistics.pstdev(logprobs),
            "logprobs": logprobs,
            "rank_median": statistics.median(s["rank"] for _, s in keys),
        }
    return out


def relative(figures: dict, dense: dict) -> dict:
    """Perplexity against the full cache's (1: no loss), per text."""
    if "ppl" not in figures:
        return {}
    return {"ppl_ratio": {text: value / dense["ppl"][text] for text, value in figures["ppl"].items()}}


def paired(cells: list[dict], group: tuple, setting: str) -> list[dict]:
    """The paired statement: for each group (:data:`CELL_GROUP`: the policy, its ratio or bits, the
    context) and each ``setting`` (keep_sinks) other than 0, the change against 0 (none for a press
    at ratio 0, the dense cache):
    the perplexity ratio minus 1 per text, the passkey accuracy and mean key log-probability
    differences, with the spread of the per-prompt differences and the prompts whose key got more
    probable (the same prompts in both), and per multiple-choice task the paired verdict
    (``choice_change``: McNemar, the accuracy and gold log-likelihood changes)."""
    by = {(*(c[k] for k in group), c[setting]): c for c in cells}
    effects = []
    for key, cell in by.items():
        *where, value = key
        base = by.get((*where, 0))
        if value == 0 or base is None or cell.get("ratio") == 0:  # ratio 0 evicts nothing: no sink effect
            continue
        entry = {**dict(zip(group, where)), setting: value}
        if "ppl" in cell:
            entry["ppl_change"] = {t: cell["ppl"][t] / base["ppl"][t] - 1 for t in cell["ppl"]}
        if "passkey" in cell:
            entry["accuracy_change"] = cell["passkey"]["accuracy"] - base["passkey"]["accuracy"]
            entry["logprob_change"] = cell["passkey"]["logprob_mean"] - base["passkey"]["logprob_mean"]
            changes = [a - b for a, b in zip(cell["passkey"]["logprobs"], base["passkey"]["logprobs"])]
            entry["logprob_change_std"] = statistics.pstdev(changes)
            entry["prompts_more_likely"] = sum(change > 0 for change in changes)
            entry["prompts"] = len(changes)
        if "choice" in cell:
            entry["choice_change"] = {task: choice_verdict(base["choice"][task], cell["choice"][task]) for task in cell["choice"]}
        effects.append(entry)
    return effects


def choice_verdict(base: dict, cell: dict) -> dict:
    """The paired verdict of one task's records in two cells (the same prompts): :func:`~sinklab.accuracy.verdict`."""
    return verdict(Scored.from_record(base), Scored.from_record(cell))
