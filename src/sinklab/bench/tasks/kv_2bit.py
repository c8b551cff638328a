"""2-bit KV with and without the sink protected: KIVI's packed 2-bit cache (keys per channel,
values per token, groups of 32, the last 128 to 159 tokens in full precision) with no token
protected and with the first token kept in full precision (KVQuant's first-token ablation), judged
like the compressed context: text perplexity after it and passkey retrieval, against the full cache.

The two are compared at the same full-precision recent tokens (the same positions; 128 at the
1,024-token ppl windows), the protected token held in full precision besides them.

Versions: 1 (sinklab before issue 39) counted KIVI's groups from after the protected token, so
protect=1 also kept up to 31 more recent tokens in full precision (1 + 159 against 128 at 1,024
tokens): part of its gain was those tokens. 2: the same recent tokens with and without protection
(:class:`~sinklab.kvcache.KIVI`)."""

from ...compress import COMPRESS, positions_read
from ..readers import compressed_cell
from ..task import BenchTask, metric, register

PROTECT = (0, 1)


def read(result) -> dict:
    cells = {cell["keep_sinks"]: cell for cell in result.summary["cells"]}  # KIVI's protect settings
    metrics = {}
    for protect in PROTECT:
        metrics.update(compressed_cell(cells[protect], f"protect{protect}", result.summary))
    corpus = result.summary["corpus"]
    protected, bare = cells[1]["ppl_ratio"][corpus], cells[0]["ppl_ratio"][corpus]
    metrics["ppl_ratio_gain"] = metric(bare / protected)  # an effect size: neither direction is better
    details = {"bytes_ratio": {str(p): cells[p]["bytes_ratio"] for p in PROTECT}}
    # the full cache's own figures: a reader sees whether two results' arithmetic differs (issue 39)
    details["dense"] = result.summary.get("dense")
    return {"metrics": metrics, "details": details}


TASK = register(
    BenchTask(
        name="kv_2bit",
        version=2,
        group="payoff",
        title="2-bit KV: sink protected vs not",
        paper="Liu et al. 2024 (ICML), KIVI; Hooper et al. 2024, KVQuant (first token in fp16)",
        capability=COMPRESS,
        settings={
            "bos": "auto",
            "presses": (),
            "quantizers": ("kivi",),
            "bits": (2,),
            "keep_sinks": PROTECT,
            "group_size": 32,
            "residual": 128,
            "contexts": (1024,),
            "tasks": ("ppl", "passkey"),
            "corpus": "shakespeare",
            "outside": "pydoc",
            "keys": 2,
            "seed": 0,
        },  # fmt: skip
        quick={"contexts": (512,), "keys": 1},
        read=read,
        positions=lambda s: positions_read(s["contexts"]),
        ratios=("ppl_ratio_gain",),
        headline="ppl_ratio_gain",
    )
)
