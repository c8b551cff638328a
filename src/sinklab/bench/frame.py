"""A bench summary as tidy tables: ``leaderboard`` (``.frame()``: one row per model, a column per
task's headline metric, None where the task does not apply to the model) and ``metrics`` (one row
per model, task and metric, with its spread), and the same two as CSV files in the run directory."""

from __future__ import annotations

import csv
from pathlib import Path

from ..core.atomic import atomic_path
from ..models.hf import DEFAULT_MODEL
from ..scan import label_of

LEAD = ("model", "dtype", "device", "label")


def model_label(model) -> str:
    """A model's row on the leaderboard: the built-in model is ``smollm2`` however it was named
    (left out on the command line, None or ``"smollm2"`` in a notebook), so one model is one label
    and its results merge and compare as one; any other model is named as typed."""
    return DEFAULT_MODEL if model in (None, DEFAULT_MODEL) else label_of(model)


def _lead(results: dict) -> dict:
    return {"model": results["model_name"], "dtype": results["dtype"], "device": results["device"], "label": results["label"]}


def metric_rows(summary: dict):
    """One row per (model, task, metric): value, spread, n, what the spread is over, which way is better."""
    for results in summary["models"]:
        for name, entry in results["tasks"].items():
            headline = summary["tasks"].get(name, {}).get("headline")
            for metric, m in entry["metrics"].items():
                yield {
                    **_lead(results),
                    "task": name,
                    "version": entry["version"],
                    "group": entry["group"],
                    "metric": metric,
                    **m,
                    "headline": metric == headline,
                }


def headline_column(name: str, card: dict) -> str:
    return f"{name}/{card['headline']}"


def leaderboard_rows(summary: dict):
    """One row per model: each task's headline metric (``task/metric``) and the wall time."""
    for results in summary["models"]:
        row = _lead(results)
        for name, card in summary["tasks"].items():
            entry = results["tasks"].get(name)
            row[headline_column(name, card)] = entry["metrics"].get(card["headline"], {}).get("value") if entry else None
        row["wall_s"] = results["wall_s"]
        yield row


BENCH_TABLES = {"leaderboard": leaderboard_rows, "metrics": metric_rows}  # .frame(): the leaderboard
CSV_FILES = {"leaderboard": "leaderboard.csv", "metrics": "metrics.csv"}


def write_csv(out: Path, summary: dict) -> list[str]:
    """Both tables as CSV (atomically); returns the file names."""
    for table, name in CSV_FILES.items():
        rows = list(BENCH_TABLES[table](summary))
        columns = list(dict.fromkeys(key for row in rows for key in row)) or list(LEAD)
        with atomic_path(out / name) as tmp, open(tmp, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, columns)
            writer.writeheader()
            writer.writerows(rows)
    return list(CSV_FILES.values())
