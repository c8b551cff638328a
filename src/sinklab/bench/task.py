"""A benchmark task: a small declarative definition (lm-evaluation-harness style) of one
measurement that sinklab already makes, run with fixed inputs and read into a few named metrics.

A task names the capability that measures (``SCAN``, ``INTERVENE``, ``STREAM``, ``COMPRESS``,
``ADAPT``), that capability's settings (the same names as its command's flags; ``quick`` overrides
them under ``--limit quick``) and how to read its summary into metrics. Its ``version`` is part of
every result: changing what a task measures (its settings, its inputs, its reading) bumps it, so
results of two versions are never set side by side.

A task's inputs are fixed and generated offline (the default corpus, Python's reference as the
outside-corpus text, seeded passkeys) and every setting it depends on is written in the task (none
is left to a capability default that may change), so a result depends on the model, its revision,
dtype and device (float32 results agree across devices to rounding), and the task's version; the
results file records the sinklab commit too.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from ..core import configs, pipeline
from ..core.errors import SinklabError, check
from ..core.results import Capability, RunResult
from ..core.runs import config_record
from ..models.subjects import Subject

#: The groups a suite's tasks fall in (the issue's three questions), in the order pages list them.
GROUPS = {
    "sinking": "how it sinks",
    "dependence": "how much it depends on the sink",
    "payoff": "what the sink buys",
}
#: ``--limit`` values: None runs each task in full.
LIMITS = ("quick",)


def metric(value: Any, spread: Optional[float] = None, n: Optional[int] = None, over: Optional[str] = None, better=None) -> dict:
    """One figure of a task: its ``value``, the standard deviation ``spread`` of the ``n`` units
    it is the mean of (``over`` names them: prompts, layers, chunks), and whether a ``better``
    model has it ``higher`` or ``lower`` (None: neither, e.g. a layer index)."""
    finite = lambda x: None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x  # noqa: E731
    return {"value": finite(value), "spread": finite(spread), "n": n, "over": over, "better": better}


def spread_of(values: Sequence[float], over: str, better=None) -> dict:
    """The mean of ``values`` as a metric, with their standard deviation (n - 1) as the spread."""
    values = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not values:
        return metric(None, over=over, better=better)
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else None
    return metric(mean, std, len(values), over, better)


@dataclass(frozen=True)
class BenchTask:
    """One task of the suite. ``read(result)`` turns the capability's result into metrics (name ->
    :func:`metric`) and, optionally, ``profiles`` (name -> a list of numbers by layer, drawn on
    the leaderboard page) and ``details`` (what a reader checks a figure against, e.g. the tokens
    flagged); it returns ``{"metrics": ..., "profiles": ..., "details": ...}``."""

    name: str
    version: int
    group: str
    title: str
    paper: str
    capability: Capability
    settings: dict
    read: Callable[[RunResult], dict]
    positions: Callable[[dict], int]  # the longest input the task feeds the model, from its settings
    quick: dict = field(default_factory=dict)
    headline: str = ""  # the metric the leaderboard's table shows for this task
    #: (a profile it reads, the y-axis title): drawn through depth on the leaderboard, as <name>.png.
    profile: tuple = ()
    #: Metrics that are ratios (1: no effect), drawn as bars in its group's figure (<group>.png).
    ratios: tuple = ()

    def __post_init__(self) -> None:
        check(self.group in GROUPS, f"task {self.name}: group must be one of {', '.join(GROUPS)}")

    def values(self, limit: Optional[str]) -> dict:
        """The capability's settings this task runs with (``--limit quick``'s overrides applied)."""
        return {**self.settings, **(self.quick if limit == "quick" else {})}

    def config(self, model: Optional[str], load: Any, limit: Optional[str]) -> Any:
        """The capability's configuration for ``model`` loaded with ``load``."""
        return configs.build(self.capability.config, {**self.values(limit), "model": model, **configs.flat(load)})

    def run(self, model: Optional[str], load: Any, limit: Optional[str] = None, subject: Optional[Subject] = None) -> dict:
        """Measure ``model`` (loaded once, or the model object ``subject`` it names, measured in
        memory through the one pipeline) and read the result: the task's entry in a results file
        (its version, configuration, wall time, metrics). A model the task cannot measure as
        defined (inputs longer than the positions it was trained on, an architecture the capability
        refuses) gets an entry that says why (``not_applicable``) and no metrics: never a number
        measured some other way."""
        cfg = self.config(model, load, limit)
        started = time.perf_counter()
        entry = {"version": self.version, "group": self.group, "capability": self.capability.kind, "config": config_record(cfg)}
        subject = subject or Subject.from_model(load.load(model))  # a model that does not load fails the job: no entry
        try:
            needed, trained = self.positions(self.values(limit)), subject.max_positions
            check(trained is None or needed <= trained, f"it reads {needed} positions and the model has {trained}")
            result = pipeline.run(self.capability, cfg, subject)
        except SinklabError as exc:
            return {**entry, "not_applicable": str(exc), "wall_s": time.perf_counter() - started, "model_facts": {},
                    "metrics": {}, "profiles": {}, "details": {}}  # fmt: skip
        read = self.read(result)
        return {
            **entry,
            "not_applicable": None,
            "wall_s": time.perf_counter() - started,
            "model_facts": {key: result.summary.get(key) for key in pipeline.MODEL_FACTS},
            "metrics": read["metrics"],
            "profiles": read.get("profiles", {}),
            "details": read.get("details", {}),
        }


TASKS: dict[str, BenchTask] = {}


def register(task: BenchTask) -> BenchTask:
    """Make a task known to suites and to ``sinklab bench --tasks``."""
    check(task.name not in TASKS, f"task {task.name} is registered twice")
    TASKS[task.name] = task
    return task
