"""An intervention run's summary as a tidy table: one row per (experiment, layer), with the
baseline's figures beside the edited ones."""

from __future__ import annotations

from typing import Iterator

from ..accuracy import paired_columns
from ..core.results import table_rows


def intervene_rows(summary: dict) -> Iterator[dict]:
    """Rows with ``experiment`` (its label), ``intervention`` (its type), ``lam`` (the strength of
    amplify or scale: the factor on token k's deviation from the mean output, or on the output),
    ``k``, ``layer``, ``share_at_k`` and ``share_at_0`` (the mean attention weight that queries
    after k give to key k, and to key 0: a fraction in [0, 1], averaged over heads, those queries
    and the sequences) after the edit and ``..._before`` it, and the run's next-token ``loss``
    (nats) and ``ppl`` with ``loss_before``."""
    return table_rows(summary, _rows(summary))


def _rows(summary: dict) -> Iterator[dict]:
    base = summary["baseline"]
    for r in summary["results"]:
        kind = (
            r["intervention"]["type"] if isinstance(r["intervention"], dict) else "+".join(iv["type"] for iv in r["intervention"])
        )
        before_k = base["share_at"][str(r["k"])]
        for layer, (at_k, at_0) in enumerate(zip(r["share_at_k"], r["share_at_0"])):
            yield {
                "experiment": r["label"],
                "intervention": kind,
                "lam": r["lam"],
                "k": r["k"],
                "layer": layer,
                "share_at_k": at_k,
                "share_at_k_before": before_k[layer],
                "share_at_0": at_0,
                "share_at_0_before": base["share_at_0"][layer],
                "loss": r["loss"],
                "loss_before": base["loss"],
                "ppl": r["ppl"],
            }


def accuracy_rows(summary: dict) -> Iterator[dict]:
    """Per ``--accuracy`` task and experiment (empty without ``--accuracy``): test-split ``acc`` intact
    and ``edited``, the paired ``acc_change`` with its 95 % interval, McNemar's exact ``mcnemar_p``,
    and the gold answer's mean log-likelihood (nats) intact, edited and its paired change."""
    return table_rows(summary, (_accuracy(r) for r in summary.get("accuracy", ())))


def _accuracy(r: dict) -> dict:
    return {
        "task": r["task"],
        "experiment": r["experiment"],
        "n": r["intact"]["n"],
        "shots": r["intact"]["shots"],
        "chance": r["chance"],
        **paired_columns(r["intact"], r["edited"], r, ("intact", "edited")),
    }


INTERVENE_TABLES = {"layers": intervene_rows, "accuracy": accuracy_rows}
