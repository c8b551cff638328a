"""What keeping the sink buys a compressed cache: every press of sinklab's KV-compression table at
fixed ratios, with no sink and with the first token kept inside the budget, judged by the
perplexity of the text after the compressed context (the default corpus, and Python's reference
outside it) and by passkey retrieval (seeded keys at 10, 50 and 90 % depth), against the full
cache. The presses follow kvpress (StreamingLLM, H2O, SnapKV, TOVA, Knorm, KeyDiff, random,
PyramidKV)."""

import math

from ...compress import COMPRESS, positions_read
from ..readers import compressed_cell
from ..task import BenchTask, register, spread_of

KEEP = (0, 1)
#: The presses of version 1, named (a press added to the registry later is not in it).
PRESSES_V1 = ("h2o", "keydiff", "knorm", "snapkv", "pyramidkv", "random", "streaming_llm", "tova")


def cell_name(cell: dict) -> str:
    return f"{cell['policy']}@{cell['ratio']:g}/keep{cell['keep_sinks']}"


def read(result) -> dict:
    s = result.summary
    metrics, by_pair = {}, {}
    for cell in s["cells"]:
        metrics.update(compressed_cell(cell, cell_name(cell), s))
        by_pair.setdefault((cell["policy"], cell["ratio"]), {})[cell["keep_sinks"]] = cell
    corpus = s["corpus"]
    gains = [math.log(pair[0]["ppl_ratio"][corpus] / pair[1]["ppl_ratio"][corpus]) for pair in by_pair.values()]
    passkey_gains = [
        pair[1]["passkey"]["accuracy"] - pair[0]["passkey"]["accuracy"] for pair in by_pair.values() if "passkey" in pair[1]
    ]
    metrics["log_ppl_gain"] = spread_of(gains, over="press x ratio")  # an effect size: neither direction is better
    metrics["passkey_gain"] = spread_of(passkey_gains, over="press x ratio")
    return {"metrics": metrics, "details": {"dense": s["dense"]}}


TASK = register(
    BenchTask(
        name="compressed_context",
        version=1,
        group="payoff",
        title="compressed context: sink kept vs not",
        paper="Xiao et al. 2024; kvpress (NVIDIA) presses; sinklab compress",
        capability=COMPRESS,
        settings={
            "bos": "auto",
            "presses": PRESSES_V1,
            "ratios": (0.5, 0.875),
            "keep_sinks": KEEP,
            "quantizers": (),
            "contexts": (1024,),
            "tasks": ("ppl", "passkey"),
            "corpus": "shakespeare",
            "outside": "pydoc",
            "keys": 2,
            "seed": 0,
        },  # fmt: skip
        quick={"presses": ("streaming_llm", "snapkv", "knorm"), "ratios": (0.5,), "contexts": (512,), "keys": 1},
        read=read,
        positions=lambda s: positions_read(s["contexts"]),
        headline="log_ppl_gain",
    )
)
