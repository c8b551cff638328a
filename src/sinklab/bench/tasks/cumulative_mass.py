"""The sink survey's cumulative-mass criterion (Su et al. 2026, arXiv 2604.10098): a key is a sink
when the total attention it receives exceeds a slack factor times the mean total; reported with
the positions it flags, the first token's and any later ones."""

from ...scan import SCAN
from ..task import Task, metric, register, spread_of


def read(result) -> dict:
    found = result.summary["cumulative_sinks"]
    recorded = [v for v in found["first_by_layer"] if v is not None]
    flagging_first = sum(1 for layer in found["by_layer"] if any(hit["position"] == 0 for hit in layer))
    beyond = [p for p in found["positions"] if p["position"] > 0]
    return {
        "metrics": {
            "first_ratio": spread_of(recorded, over="layers"),
            "layers_flagging_first": metric(flagging_first / len(recorded) if recorded else None, n=len(recorded), over="layers"),
            "positions_beyond_first": metric(len(beyond)),
        },
        "profiles": {"cumulative_mass_first_by_layer": found["first_by_layer"]},
        "details": {"slack": found["slack"], "flagged": found["positions"]},
    }


TASK = register(
    Task(
        name="cumulative_mass",
        version=1,
        group="sinking",
        title="cumulative-mass sinks (survey criterion)",
        paper="Su et al. 2026, Attention Sink in Transformers: A Survey (arXiv 2604.10098)",
        capability=SCAN,
        settings={"corpus": "shakespeare", "tokens": 64, "batch": 32, "seed": 0},
        quick={"batch": 8},
        read=read,
        headline="layers_flagging_first",
    )
)
