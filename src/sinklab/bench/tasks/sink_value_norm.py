"""The sink token's value norm: per layer, the first position's value-vector norm over the mean of
the others' (Guo et al. 2024's "value drain": a sink that receives attention but contributes
little has a small value)."""

from ...scan import SCAN
from ..task import BenchTask, metric, register, spread_of


def read(result) -> dict:
    values = result.summary["norms"]["value"]
    ratios = [f / r if f is not None and r else None for f, r in zip(values["first"], values["rest_mean"])]
    recorded = [v for v in ratios if v is not None]
    return {
        "metrics": {"ratio": spread_of(recorded, over="layers"), "min_ratio": metric(min(recorded) if recorded else None)},
        "profiles": {"value_norm_ratio_by_layer": ratios},
    }


TASK = register(
    BenchTask(
        name="sink_value_norm",
        version=1,
        group="sinking",
        title="sink value norm / others'",
        paper="Guo et al. 2024, Active-Dormant Attention Heads (value drain)",
        capability=SCAN,
        settings={"bos": "auto", "corpus": "shakespeare", "tokens": 64, "batch": 32, "seed": 0},
        quick={"batch": 8},
        read=read,
        positions=lambda s: s["tokens"],
        profile=("value_norm_ratio_by_layer", "value norm at 0 / others'"),
        headline="ratio",
    )
)
