"""First-token mass per layer: the mean attention weight the queries give position 0, averaged
over heads (StreamingLLM's observation, Xiao et al. 2024; the quantity Li et al. 2026 trace through
depth)."""

from ...scan import SCAN
from ..task import BenchTask, metric, register, spread_of


def read(result) -> dict:
    s = result.summary
    by_layer = s["first_token_mass_by_layer"]
    recorded = [v for v in by_layer if v is not None]
    return {
        "metrics": {
            "mean": spread_of(recorded, over="layers"),
            "max": metric(max(recorded) if recorded else None),
            "start_layer": metric(s["first_token_mass_start_layer"]),
        },
        "profiles": {"first_token_mass_by_layer": by_layer},
    }


TASK = register(
    BenchTask(
        name="first_token_mass",
        version=1,
        group="sinking",
        title="first-token mass per layer",
        paper="Xiao et al. 2024 (ICLR), Efficient Streaming Language Models with Attention Sinks",
        capability=SCAN,
        settings={"bos": "auto", "corpus": "shakespeare", "tokens": 64, "batch": 32, "seed": 0, "min_query": 1},
        quick={"batch": 8},
        read=read,
        positions=lambda s: s["tokens"],
        profile=("first_token_mass_by_layer", "first-token mass"),
        headline="mean",
    )
)
