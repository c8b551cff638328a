"""Sink_1^0.3 at T = 64: the share of (layer, head) pairs whose mean attention on the first token,
over the queries after it, exceeds 0.3 (Gu et al. 2025, "When Attention Sink Emerges in Language
Models", ICLR; their T = 64 and eps = 0.3)."""

from ...scan import SCAN
from ..task import BenchTask, metric, register


def read(result) -> dict:
    s = result.summary
    heads = s["layers"] * s["heads"]
    return {
        "metrics": {"sink_rate": metric(s["sink_rate"]["value"], n=heads, over="heads")},
        "profiles": {"sink_share_by_layer": s["sink_share_by_layer"]},
    }


TASK = register(
    BenchTask(
        name="sink_rate",
        version=1,
        group="sinking",
        title="Sink_1^0.3 (T = 64)",
        paper="Gu et al. 2025 (ICLR), When Attention Sink Emerges in Language Models",
        capability=SCAN,
        settings={"bos": "auto", "corpus": "shakespeare", "tokens": 64, "batch": 32, "seed": 0, "eps": 0.3, "sink_k": 1},
        quick={"batch": 8},
        read=read,
        positions=lambda s: s["tokens"],
        headline="sink_rate",
    )
)
