"""W8A8 with BOS in the stream against the sink as a cached prefix: int8 weights per output channel
and int8 activations per tensor (dynamic scales), scored on held-out windows of the default corpus, once with BOS run
through the quantized model and once with BOS's keys and values precomputed in full precision and
given as a cache prefix (Son et al. 2024, "Prefixing Attention Sinks can Mitigate Activation
Outliers"; sinklab adapt --sink-prefix)."""

from ...adapt import ADAPT
from ..task import BenchTask, metric, register


def read(result) -> dict:
    ppl = result.summary["ppl"]
    fp, w8a8 = ppl["fp"], ppl["w8a8"]
    return {
        "metrics": {
            "ppl_fp": metric(fp["bos"], better="lower"),
            "ppl_bos_in_stream": metric(w8a8["bos"], better="lower"),
            "ppl_sink_prefix": metric(w8a8["prefix"], better="lower"),
            "prefix_gain": metric(w8a8["bos"] / w8a8["prefix"]),  # an effect size: neither direction is better
        }
    }


TASK = register(
    BenchTask(
        name="w8a8_prefix",
        version=1,
        group="payoff",
        title="W8A8: BOS in stream vs sink prefix",
        paper="Son et al. 2024 (EMNLP), Prefixing Attention Sinks can Mitigate Activation Outliers",
        capability=ADAPT,
        settings={
            "corpus": "shakespeare",
            "tokens": 255,
            "windows": 8,
            "calibration": 4,
            "schemes": ("w8a8",),
            "bos": "yes",
            "prefix_tokens": 0,
            "search_seconds": 300.0,
            "candidates": 64,
        },  # fmt: skip  (BOS + 255 tokens: the 256 positions a small pretrained model may have)
        quick={"windows": 2, "calibration": 2},
        read=read,
        positions=lambda s: s["tokens"] + 1,  # BOS (in the stream or as the prefix), then the window
        ratios=("prefix_gain",),
        headline="prefix_gain",
    )
)
