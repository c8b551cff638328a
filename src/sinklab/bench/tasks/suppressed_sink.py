"""Perplexity with the sink suppressed against intact: every query's score on position 0 set to
-inf in every layer (the first token stays in the input and attends to itself), on held windows of
the default corpus. How much the model's predictions depend on its sink."""

from ...intervene import INTERVENE, suppress_sink
from ..task import BenchTask, metric, register


def read(result) -> dict:
    s = result.summary
    intact, suppressed = s["baseline"]["ppl"], s["results"][0]["ppl"]
    return {
        "metrics": {
            "ppl_intact": metric(intact, better="lower"),
            "ppl_suppressed": metric(suppressed, better="lower"),
            "ppl_ratio": metric(suppressed / intact),  # how much it depends on its sink: neither direction is better
        },
        "profiles": {"first_token_mass_by_layer_suppressed": s["results"][0]["share_at_0"]},
    }


TASK = register(
    BenchTask(
        name="suppressed_sink",
        version=1,
        group="dependence",
        title="ppl with the sink suppressed / intact",
        paper="Gu et al. 2025 (ICLR); Li et al. 2026 (ICML): removing the sink",
        capability=INTERVENE,
        settings={
            "bos": "auto",
            "corpus": "shakespeare",
            "tokens": 256,
            "batch": 8,
            "seed": 0,
            "interventions": (suppress_sink(0),),
        },
        quick={"tokens": 128, "batch": 4},
        read=read,
        positions=lambda s: s["tokens"],
        ratios=("ppl_ratio",),
        headline="ppl_ratio",
    )
)
