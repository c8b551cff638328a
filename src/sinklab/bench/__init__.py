"""``sinklab bench``: a versioned suite that scores any model on how it sinks, how much it depends
on the sink and what the sink buys (one file per task in ``tasks/``), one results file per model,
and a leaderboard that merges results made on different machines."""

from .compare import BENCH_COMPARE, BenchCompareConfig
from .frame import BENCH_TABLES
from .results import RESULTS_DIR, read_results
from .run import BENCH, BenchConfig, BenchJob
from .task import GROUPS, LIMITS, TASKS, BenchTask, metric, register, spread_of
from .tasks import DEFAULT_SUITE, SUITES

__all__ = [
    "BENCH",
    "BENCH_COMPARE",
    "BENCH_TABLES",
    "DEFAULT_SUITE",
    "GROUPS",
    "LIMITS",
    "RESULTS_DIR",
    "SUITES",
    "TASKS",
    "BenchCompareConfig",
    "BenchConfig",
    "BenchJob",
    "BenchTask",
    "metric",
    "read_results",
    "register",
    "spread_of",
]
