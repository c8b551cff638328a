"""Super neurons: FFN neurons far more active at position 0 than anywhere else (mean |a| at 0 over
the mean elsewhere >= 100, and >= 100 at 0), the amplifiers Li et al. (2026, ICML) find behind the
sink's outlier dimensions."""

from ...scan import SCAN
from ..task import BenchTask, metric, register


def read(result) -> dict:
    found = sorted(result.summary["super_neurons"], key=lambda n: -n["act_first"])
    top = found[0] if found else {}
    return {
        "metrics": {
            "count": metric(len(found)),
            "largest_activation": metric(top.get("act_first")),
            "layer": metric(top.get("layer")),
            "neuron": metric(top.get("neuron")),
        },
        "details": {"top": [{k: n[k] for k in ("layer", "neuron", "act_first", "ratio")} for n in found[:5]]},
    }


TASK = register(
    BenchTask(
        name="super_neurons",
        version=1,
        group="sinking",
        title="super neurons",
        paper="Li et al. 2026 (ICML), variance discrepancy and super neurons",
        capability=SCAN,
        settings={
            "bos": "auto",
            "corpus": "shakespeare",
            "tokens": 64,
            "batch": 32,
            "seed": 0,
            "super_min_ratio": 100.0,
            "super_min_activation": 100.0,
        },
        quick={"batch": 8},
        read=read,
        positions=lambda s: s["tokens"],
        headline="count",
    )
)
