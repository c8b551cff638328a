"""The largest massive activation: the residual-stream entry of largest |h| over Sun et al.'s
thresholds (|h| > 100 and > 1000 x the layer's median |h|), with its layer, dimension and
position (Sun et al. 2024, "Massive Activations in Large Language Models", COLM)."""

from ...scan import SCAN, largest_massive_activation
from ..task import BenchTask, metric, register


def read(result) -> dict:
    s = result.summary
    top = largest_massive_activation(s) or {}
    ratios = [v for v in s["max_over_median"] if v is not None]
    return {
        "metrics": {
            "value": metric(abs(top["value"]) if top else None),
            "layer": metric(top.get("layer")),
            "dim": metric(top.get("dim")),
            "position": metric(top.get("position")),
            "max_over_median": metric(max(ratios) if ratios else None),
        },
        "profiles": {"max_over_median_by_layer": s["max_over_median"]},
        "details": {
            "found": len(s["massive_activations"]),
            "thresholds": [s["settings"]["massive_absolute"], s["settings"]["massive_relative"]],
        },
    }


TASK = register(
    BenchTask(
        name="massive_activation",
        version=1,
        group="sinking",
        title="largest massive activation",
        paper="Sun et al. 2024 (COLM), Massive Activations in Large Language Models",
        capability=SCAN,
        settings={
            "bos": "auto",
            "corpus": "shakespeare",
            "tokens": 64,
            "batch": 32,
            "seed": 0,
            "massive_absolute": 100.0,
            "massive_relative": 1000.0,
        },
        quick={"batch": 8},
        read=read,
        positions=lambda s: s["tokens"],
        headline="value",
    )
)
