"""``sinklab bench --compare``: the results files of bench runs made elsewhere merged into one
leaderboard, once they line up (:func:`lined_up`), refused in one line naming a file otherwise."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..core.configs import setting
from ..core.errors import check
from ..core.results import Capability, RunContext, RunResult, stamped
from . import plots
from .frame import BENCH_TABLES, model_label
from .results import check_one_result_per_version, read_results_files
from .run import summarise, write
from .task import TASKS
from .tasks import SUITES


@dataclass
class BenchCompareConfig:
    """``sinklab bench --compare``'s settings: the bench runs (or results files) merged."""

    runs: tuple[str, ...] = setting((), help="bench run directories or results files", cli=False)

    def __post_init__(self) -> None:
        check(self.runs, "--compare needs at least one bench run directory or results file")


_LINED_UP: dict = {}  # the results the preflight lined up, for the comparison that follows it


def line_up(cfg: BenchCompareConfig, context: RunContext) -> None:
    """``--compare``'s preflight: :func:`lined_up`, kept for :func:`compare` (read and checked once)."""
    _LINED_UP.clear()
    _LINED_UP[cfg.runs] = lined_up(cfg)


def compare(cfg: BenchCompareConfig, context: RunContext = RunContext()) -> RunResult:
    """One leaderboard from results made on different machines, once they line up (:func:`lined_up`)."""
    models = _LINED_UP.pop(cfg.runs, None) or lined_up(cfg)
    names = list(dict.fromkeys(name for results in models for name in results["tasks"]))
    labels = [m["label"] for m in models]
    for i, results in enumerate(models):  # the same model measured on two machines: told apart by its place
        if labels.count(results["label"]) > 1:
            results["label"] = f"{results['label']} [{i}: {results['source']}]"
    order = [name for name in SUITES.get(models[0]["suite"], ()) if name in names] or names
    summary = summarise(models[0]["suite"], models[0]["limit"], models, order, sources=[str(run) for run in cfg.runs])
    return RunResult(stamped("bench", summary))


def lined_up(cfg: BenchCompareConfig) -> list[dict]:
    """The results of ``cfg.runs``, each with its label and source, refused in one line naming a
    file where they would not line up: two suites or limits, a task at a version other than this
    sinklab's, a task run with other settings (its inputs) for two models, one model given
    different values by a task at one version, one file (or copies of it) named twice. Run by
    ``--compare``'s preflight, so a refusal leaves ``--out`` as it was."""
    found = [(run, file, results) for run in cfg.runs for file, results in read_results_files(Path(run))]
    for key in ("suite", "limit"):
        values = _first_file_of((str(results[key]), file) for _, file, results in found)
        listed = "; ".join(f"{value} in {file}" for value, file in values.items())
        check(len(values) == 1, f"these results were made with different {key}s ({listed}): they do not line up")
    for name in dict.fromkeys(name for _, _, results in found for name in results["tasks"]):
        entries = [(file, results["tasks"][name]) for _, file, results in found if name in results["tasks"]]
        check(name in TASKS, f"task {name} is not known to this sinklab ({entries[0][0]}): compare with the sinklab that made it")
        versions = sorted({entry["version"] for _, entry in entries})
        other = next((file for file, entry in entries if entry["version"] != TASKS[name].version), None)
        check(
            other is None,
            f"task {name} was measured at version {', '.join(map(str, versions))}; this sinklab's is {TASKS[name].version}: "
            f"they do not line up ({other})",
        )
        inputs = _first_file_of((json.dumps(_inputs(entry["config"]), sort_keys=True), file) for file, entry in entries)
        listed = " and ".join(map(str, inputs.values()))
        check(len(inputs) == 1, f"task {name} ran with different settings in these results ({listed})")
    _named_once(found)
    check_one_result_per_version([(file, results) for _, file, results in found])
    return [{**results, "label": model_label(results["model"]), "source": str(run)} for run, _, results in found]


def _named_once(found: list) -> None:
    """Refuse one results file, or two copies of it, named twice: one measurement would stand on
    the leaderboard as two models."""
    files: dict = {}
    for _, file, results in found:
        keys = (Path(file).resolve(), json.dumps(results, sort_keys=True))
        same = next((files[key] for key in keys if key in files), None)
        check(
            same is None,
            f"{file} holds the same results as {same} (one file named twice, or a copy): "
            "one measurement would be merged as two models; name it once",
        )
        files.update(dict.fromkeys(keys, file))


def _first_file_of(pairs) -> dict:
    """{value: the first file that has it} of (value, file) pairs: what a refusal names."""
    first: dict = {}
    for value, file in pairs:
        first.setdefault(value, file)
    return first


def _inputs(config: dict) -> dict:
    """A task's configuration without where and how the model was loaded."""
    return {k: v for k, v in config.items() if k not in ("model", "load")}


BENCH_COMPARE = Capability(  # its summary is a bench summary (kind "bench"): read back as one
    "bench_compare",
    BenchCompareConfig,
    compare,
    write,
    tables=BENCH_TABLES,
    write_page=plots.write_page,
    figures=lambda result: plots.figures(result.summary),
    sections=plots.sections,
    preflight=line_up,
)
