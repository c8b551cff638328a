"""A tuning run's summary as tidy tables: the verdict per task (``tasks``, the default) and every
candidate tried on validation (``validation``)."""

from __future__ import annotations

from typing import Iterator

from ..accuracy import paired_columns
from ..core.results import table_rows


def verdict_rows(summary: dict) -> Iterator[dict]:
    """Per task: the test split untouched and tuned (``acc``, ``acc_norm``, ``gold_loglik``: the
    correct choice's mean log-likelihood, nats), the paired changes with their 95 % interval,
    McNemar's exact p and the examples ``gained``/``lost``, the chance level, the tuning chosen."""
    return table_rows(summary, (_verdict(summary, t) for t in summary["tasks"]))


def _verdict(summary: dict, t: dict) -> dict:
    before, after, paired = t["test"]["untouched"], t["test"]["tuned"], t["paired"]
    return {
        "task": t["task"],
        "method": summary["method"],
        "mode": summary["mode"],
        "shots": summary["shots"],
        "n": before["n"],
        "chance": t["chance"],
        "chosen": t["chosen"],
        "heads_tuned": t["heads_tuned"],
        **paired_columns(before, after, paired, ("untouched", "tuned")),
        "gained": paired["mcnemar"]["gained"],
        "lost": paired["mcnemar"]["lost"],
        "acc_norm_untouched": before["acc_norm"],
        "acc_norm_tuned": after["acc_norm"],
        "gold_loglik_change_low": paired["gold_loglik_change"]["low"],
        "gold_loglik_change_high": paired["gold_loglik_change"]["high"],
    }


def validation_rows(summary: dict) -> Iterator[dict]:
    """Per task and candidate: its validation ``acc``, ``acc_norm``, ``gold_loglik``, ``entropy``
    (nats, over the choices) and whether it was ``chosen``."""
    return table_rows(
        summary,
        ({"task": t["task"], **c, "chosen": c["label"] == t["chosen"]} for t in summary["tasks"] for c in t["validation"]),
    )


TUNE_TABLES = {"tasks": verdict_rows, "validation": validation_rows}
