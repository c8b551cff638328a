"""The scan page's tables (its figures are in :mod:`.plots`): super neurons, secondary sinks and
the scanned tokens; every string from the model or its tokenizer is escaped by ``html.table``."""

from __future__ import annotations

from ..core import html


def super_neurons(s: dict) -> str:
    """Each super neuron: its layer and index, its mean |activation| at position 0 and elsewhere,
    their ratio, and the residual dimensions its down projection writes to most."""
    rows = [
        {**n, "writes": ", ".join(f"{w['dim']} ({w['magnitude']:.0f})" for w in n.get("writes_to", []))}
        for n in s["super_neurons"]
    ]
    if not rows:
        return "<p class='note'>none above the thresholds</p>"
    return html.table(
        rows,
        [
            ("layer", "layer", "d"),
            ("neuron", "neuron", "d"),
            ("mean |a| at 0", "act_first", ".1f"),
            ("mean |a| elsewhere", "act_rest_mean", ".3f"),
            ("ratio", "ratio", ".0f"),
            ("writes to dims (magnitude)", "writes", "s"),
        ],
    )


def secondary_sinks(s: dict) -> str:
    """The key positions after the first with the largest mean alpha, and the tokens there."""
    rows = [{**e, "token": " | ".join(e["tokens"])} for e in s["secondary_sinks"]]
    if not rows:
        return "<p class='note'>none</p>"
    return html.table(
        rows,
        [("position", "position", "d"), ("mean alpha", "alpha_mean", ".3f"), ("tokens there (first sequences)", "token", "s")],
    )


def token_table(strings: list[list[str]], limit: int) -> str:
    """The first sequence's first ``limit`` tokens by position."""
    if not strings:
        return "<p class='note'>not recorded</p>"
    shown = strings[0][:limit]
    return html.table(
        [{"position": i, "token": t} for i, t in enumerate(shown)], [("position", "position", "d"), ("token", "token", "s")]
    )
