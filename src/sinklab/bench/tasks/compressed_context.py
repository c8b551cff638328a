"""What keeping the sink buys a compressed cache: every press of sinklab's KV-compression table at
fixed ratios, with no sink and with the first token kept inside the budget, judged by the
perplexity of the text after the compressed context (the default corpus, and Python's reference
outside it) and by passkey retrieval (seeded keys at 10, 50 and 90 % depth), against the full
cache. The presses follow kvpress (StreamingLLM, H2O, SnapKV, TOVA, Knorm, KeyDiff, random,
PyramidKV)."""

import math

from ...compress import COMPRESS, positions_read
from ..task import Task, metric, register, spread_of

KEEP = (0, 1)
#: The presses of version 1, named (a press added to the registry later is not in it).
PRESSES_V1 = ("h2o", "keydiff", "knorm", "snapkv", "pyramidkv", "random", "streaming_llm", "tova")


def cell_name(cell: dict) -> str:
    return f"{cell['policy']}@{cell['ratio']:g}/keep{cell['keep_sinks']}"


def judged(cell: dict, name: str) -> dict:
    """A compressed or quantized cache's cell of ``sinklab compress`` as metrics named ``name/...``:
    the perplexity ratios after it (corpus, outside text) and passkey retrieval."""
    found = {
        f"{name}/ppl_ratio": metric(cell["ppl_ratio"]["shakespeare"], better="lower"),
        f"{name}/ppl_ratio_outside": metric(cell["ppl_ratio"]["pydoc"], better="lower"),
    }
    passkey = cell.get("passkey")
    if passkey:
        found[f"{name}/passkey_accuracy"] = metric(
            passkey["accuracy"], n=len(passkey["logprobs"]), over="prompts", better="higher"
        )
        found[f"{name}/key_logprob"] = spread_of(passkey["logprobs"], over="prompts", better="higher")
    return found


def read(result) -> dict:
    s = result.summary
    metrics, by_pair = {}, {}
    for cell in s["cells"]:
        metrics.update(judged(cell, cell_name(cell)))
        by_pair.setdefault((cell["policy"], cell["ratio"]), {})[cell["keep_sinks"]] = cell
    gains = [math.log(pair[0]["ppl_ratio"]["shakespeare"] / pair[1]["ppl_ratio"]["shakespeare"]) for pair in by_pair.values()]
    passkey_gains = [
        pair[1]["passkey"]["accuracy"] - pair[0]["passkey"]["accuracy"] for pair in by_pair.values() if "passkey" in pair[1]
    ]
    metrics["log_ppl_gain"] = spread_of(gains, over="press x ratio")  # an effect size: neither direction is better
    metrics["passkey_gain"] = spread_of(passkey_gains, over="press x ratio")
    return {"metrics": metrics, "details": {"dense": s["dense"]}}


TASK = register(
    Task(
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
