"""The terminal table of streaming runs (their figures are in :mod:`.plots`): perplexity, speed
and cache size per policy."""

from __future__ import annotations

from ..core.text import format_table
from .frame import ablation_label

STREAM_COLUMNS = [
    ("policy", "policy", "s"),
    ("ppl", "ppl", ".2f"),
    ("ppl first chunk", "first", ".2f"),
    ("ppl last chunk", "last", ".2f"),
    ("tokens/s", "tps", ".1f"),
    ("peak cache MiB", "cache", ".1f"),
]


def policy_rows(summary: dict) -> list[dict]:
    """One row per policy and per ablation sink count (the terminal's and the page's table; the
    frame's :func:`~.frame.stream_rows` has one per chunk)."""
    rows = []
    for name, p in {**summary["policies"], **{ablation_label(n): a for n, a in summary.get("ablation", {}).items()}}.items():
        chunks = p["ppl_by_chunk"]
        rows.append(
            {
                "policy": name,
                "ppl": p["ppl"],
                "first": chunks[0]["ppl"],
                "last": chunks[-1]["ppl"],
                "tps": p.get("tokens_per_s"),
                "cache": p["peak_cache_bytes"] / 2**20 if "peak_cache_bytes" in p else None,
            }
        )
    return rows


def stream_table(summary: dict) -> str:
    return format_table(policy_rows(summary), STREAM_COLUMNS)
