"""StreamingLLM's ablation: the perplexity of a 2,048-token stream read through a cache of 256 that
keeps 0, 1 or 4 first tokens and fills the rest with the most recent ones (0 sinks: a plain window
of the same size), against the full cache (Xiao et al. 2024's sink-count ablation, at a smaller
cache than their 1,024)."""

from ...stream import STREAM
from ..task import BenchTask, metric, register, spread_of

SINKS = (0, 1, 4)


def read(result) -> dict:
    s = result.summary
    dense = s["policies"]["dense"]["ppl"]
    metrics = {"ppl_dense": metric(dense, better="lower")}
    for n in SINKS:
        entry = s["ablation"][str(n)]
        chunks = [c["ppl"] for c in entry["ppl_by_chunk"][1:]]  # the first chunk fits in the cache: the same in all
        spread = spread_of(chunks, over="chunks")["spread"]
        metrics[f"ppl_sinks_{n}"] = metric(entry["ppl"], spread, len(chunks), "chunks of 256 after the first", "lower")
        metrics[f"ppl_ratio_sinks_{n}"] = metric(entry["ppl"] / dense)  # against the full cache: how much it needs sinks
    return {"metrics": metrics, "details": {"cache": s["sinks"] + s["window"], "tokens": s["tokens"]}}


TASK = register(
    BenchTask(
        name="streaming",
        version=1,
        group="dependence",
        title="streaming ppl with 0 / 1 / 4 sinks",
        paper="Xiao et al. 2024 (ICLR), Efficient Streaming Language Models with Attention Sinks",
        capability=STREAM,
        settings={
            "bos": "auto",
            "corpus": "shakespeare",
            "tokens": 2048,
            "sinks": 4,
            "window": 252,
            "policies": ("dense",),
            "ablation": SINKS,
            "chunk": 256,
            "latency_steps": 1,
            "check": False,
        },  # fmt: skip
        quick={"tokens": 1024},
        read=read,
        positions=lambda s: s["tokens"],
        ratios=("ppl_ratio_sinks_0", "ppl_ratio_sinks_1", "ppl_ratio_sinks_4"),
        headline="ppl_ratio_sinks_0",
    )
)
