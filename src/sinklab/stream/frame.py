"""A streaming run's summary as a tidy table: one row per (policy, chunk of the stream)."""

from __future__ import annotations

from typing import Iterator

from ..core.results import table_rows


def ablation_label(sinks) -> str:
    """How every table names the ablation's run with ``sinks`` sink tokens."""
    return f"sink n={sinks}"


def stream_rows(summary: dict) -> Iterator[dict]:
    """Rows with ``policy`` (an ablation's is ``sink n=N``), ``sinks``, ``start`` and ``end`` of
    the chunk (token positions), its ``ppl`` (exp of the mean next-token NLL in nats over the
    chunk) and, where decoding was timed there, ``ms_per_token`` (wall milliseconds per decode step)."""
    return table_rows(summary, _rows(summary))


def _rows(summary: dict) -> Iterator[dict]:
    runs = [(name, summary["sinks"] if name == "sink" else 0, entry) for name, entry in summary["policies"].items()]
    runs += [(ablation_label(n), int(n), entry) for n, entry in (summary.get("ablation") or {}).items()]
    for name, sinks, entry in runs:
        timed = {c["start"]: c["ms"] for c in entry.get("ms_per_token_by_chunk", [])}
        for chunk in entry["ppl_by_chunk"]:
            yield {
                "policy": name,
                "sinks": sinks,
                "start": chunk["start"],
                "end": chunk["end"],
                "ppl": chunk["ppl"],
                "ms_per_token": timed.get(chunk["start"]),
            }


STREAM_TABLES = {"chunks": stream_rows}
