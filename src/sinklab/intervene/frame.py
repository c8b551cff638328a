"""An intervention run's summary as a tidy table: one row per (experiment, layer), with the
baseline's figures beside the edited ones."""

from __future__ import annotations

from typing import Iterator


def intervene_rows(summary: dict) -> Iterator[dict]:
    """Rows with ``experiment`` (its label), ``intervention`` (its type), ``lam``, ``k``,
    ``layer``, ``share_at_k`` and ``share_at_0`` (the mean attention later queries give to key k
    and to key 0, heads averaged) after the edit and ``..._before`` it, and the run's ``loss`` and
    ``ppl`` with ``loss_before``."""
    base = summary["baseline"]
    for r in summary["results"]:
        kind = r["intervention"]["type"] if isinstance(r["intervention"], dict) else "+".join(iv["type"] for iv in r["intervention"])
        before_k = base["share_at"][str(r["k"])]
        for layer, (at_k, at_0) in enumerate(zip(r["share_at_k"], r["share_at_0"])):
            yield {"experiment": r["label"], "intervention": kind, "lam": r["lam"], "k": r["k"], "layer": layer,
                   "share_at_k": at_k, "share_at_k_before": before_k[layer], "share_at_0": at_0, "share_at_0_before": base["share_at_0"][layer],
                   "loss": r["loss"], "loss_before": base["loss"], "ppl": r["ppl"]}
