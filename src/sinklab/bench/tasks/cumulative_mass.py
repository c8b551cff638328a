"""The sink survey's cumulative-mass criterion (Su et al. 2026, arXiv 2604.10098): a key is a sink
when the total attention it receives exceeds a slack factor (10) times the mean total, applied to
each input. Per layer: position 0's total over the mean, the share of inputs whose first token is
flagged and the share with a later token flagged (sinks beyond position 0); the later tokens
flagged, by how often, in the details."""

from ...scan import SCAN
from ..task import BenchTask, register, spread_of


def read(result) -> dict:
    found = result.summary["cumulative_sinks"]
    return {
        "metrics": {  # spread_of leaves out the layers not recorded (None)
            "first_ratio": spread_of(found["first_by_layer"], over="layers"),
            "first_share": spread_of(found["first_share_by_layer"], over="layers"),
            "later_share": spread_of(found["later_share_by_layer"], over="layers"),
        },
        "profiles": {"cumulative_mass_first_by_layer": found["first_by_layer"]},
        "details": {"slack": found["slack"], "later_tokens": found["later_tokens"]},
    }


TASK = register(
    BenchTask(
        name="cumulative_mass",
        version=1,
        group="sinking",
        title="cumulative-mass sinks (survey criterion)",
        paper="Su et al. 2026, Attention Sink in Transformers: A Survey (arXiv 2604.10098)",
        capability=SCAN,
        settings={"bos": "auto", "corpus": "shakespeare", "tokens": 64, "batch": 32, "seed": 0},
        quick={"batch": 8},
        read=read,
        positions=lambda s: s["tokens"],
        headline="first_share",
    )
)
