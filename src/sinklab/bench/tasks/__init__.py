"""The tasks of ``sinklab bench``, one file each, and the suites that group them.

A new task is one file here that registers a :class:`~sinklab.bench.task.BenchTask` (see any of
these), imported below and named in a suite. A suite's name carries its version: changing which
tasks ``sinks-v1`` holds would be ``sinks-v2``; a task's own changes bump the task's version.
"""

from ..task import TASKS
from . import (  # noqa: F401  (each module registers its task)
    accuracy_dependence,
    compressed_context,
    cumulative_mass,
    first_token_mass,
    kv_2bit,
    massive_activation,
    sink_rate,
    sink_value_norm,
    streaming,
    super_neurons,
    suppressed_sink,
    w8a8_prefix,
    zerotuning_payoff,
)

SUITES = {
    "sinks-v1": (
        "sink_rate",
        "first_token_mass",
        "cumulative_mass",
        "massive_activation",
        "super_neurons",
        "sink_value_norm",
        "suppressed_sink",
        "streaming",
        "compressed_context",
        "kv_2bit",
        "w8a8_prefix",
    ),
}
#: sinks-v1 and the accuracy judges (issue 40): dependence and payoff measured on real tasks.
SUITES["sinks-v2"] = (*SUITES["sinks-v1"], "accuracy_dependence", "zerotuning_payoff")
DEFAULT_SUITE = "sinks-v1"

__all__ = ["DEFAULT_SUITE", "SUITES", "TASKS"]
