"""``sinklab bench``: a versioned suite of sink measurements run on any models, one job per
(model, task) through the launchers, each model's results in a results file, and a leaderboard.

With a run directory every finished job is kept in ``jobs/<model>/<task>.json`` (with the task's
version and configuration), so a stopped run resumes with the jobs left, and a run with more
models or tasks reuses those already measured; a run that would drop what the directory measured
(a model or a task left out, another suite, limit or load options) is refused before anything is
written (:func:`keeps_what_was_measured`). ``sinklab bench --compare`` (:data:`BENCH_COMPARE`)
merges the results files of runs made elsewhere into one leaderboard.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Optional

from ..core.configs import first_difference, migrate, not_result_paths, setting
from ..core.errors import check
from ..core.launchers import LOCAL, launch
from ..core.results import Capability, RunContext, RunResult, register, stamped
from ..core.runs import CONFIG, config_record, jsonable, run_differs, write_json
from ..models.hf import DEFAULT_MODEL, MODEL_HELP, LoadOptions, default_gguf_path
from ..scan import label_of
from . import plots
from .frame import BENCH_TABLES, model_label, write_csv
from .results import RESULTS_DIR, check_one_result_per_version, model_results, provenance, read_results_files
from .task import GROUPS, LIMITS, TASKS
from .tasks import DEFAULT_SUITE, SUITES

JOBS_DIR = "jobs"


@dataclass
class BenchConfig:
    """``sinklab bench``'s settings (and ``sinklab.bench_models``' keyword arguments)."""

    VERSION: ClassVar[int] = 1

    models: tuple = setting((None,), help=f"the models: {MODEL_HELP}", cli=False)
    suite: str = setting(DEFAULT_SUITE, choices=tuple(SUITES), help="the suite of tasks")
    tasks: tuple[str, ...] = setting(
        (),
        metavar="T[,T...]",
        shown="the suite's",
        help=f"only these tasks of the suite ({', '.join(SUITES[DEFAULT_SUITE])})",
    )
    limit: Optional[str] = setting(None, choices=LIMITS, help="quick: every task on fewer inputs (a smoke test, not a result)")
    load: LoadOptions = field(default_factory=LoadOptions)

    def __post_init__(self) -> None:
        self.models = tuple(self.models) or (None,)
        check(self.suite in SUITES, f"unknown suite {self.suite!r}; suites: {', '.join(SUITES)}")
        unknown = [t for t in self.tasks if t not in SUITES[self.suite]]
        check(not unknown, f"--tasks: {', '.join(unknown)} not in {self.suite}; its tasks: {', '.join(SUITES[self.suite])}")
        check(self.limit is None or self.limit in LIMITS, f"--limit takes {', '.join(LIMITS)}, got {self.limit!r}")
        labels = [model_label(m) for m in self.models]
        check(len(set(labels)) == len(labels), f"a model is named twice: {', '.join(labels)}")

    @property
    def task_names(self) -> tuple[str, ...]:
        return self.tasks or SUITES[self.suite]


@dataclass(frozen=True)
class BenchJob:
    """One (model, task) of the suite."""

    model: Optional[str]
    task: str
    limit: Optional[str]
    load: LoadOptions

    @property
    def label(self) -> str:
        return label_of(self.model)

    def fingerprint(self) -> Optional[str]:
        """What the model on disk is (names, sizes and times of its files), so a kept job is
        reused only for the model it measured, not for another one saved at the same path; None
        for a Hub id (its resolved commit is recorded as its revision)."""
        path = default_gguf_path() if self.model in (None, DEFAULT_MODEL) else Path(self.model).expanduser()
        if not path.exists():
            return None
        files = sorted(path.iterdir()) if path.is_dir() else [path]
        stats = [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file()]
        return hashlib.sha256(json.dumps(stats).encode()).hexdigest()[:16]

    def config(self) -> dict:
        return config_record(TASKS[self.task].config(self.model, self.load, self.limit))


def run_job(job: BenchJob) -> dict:
    """A task on a model: its results-file entry, with where it ran and what the model was."""
    return {**TASKS[job.task].run(job.model, job.load, job.limit), "where": provenance(), "fingerprint": job.fingerprint()}


def measure(cfg: BenchConfig, context: RunContext = RunContext()) -> RunResult:
    """Every (model, task) job, then one results file per model."""
    check(context.subject is None, "sinklab bench loads each model by name (a folder, a .gguf file or a Hub id)")
    jobs = [BenchJob(model, task, cfg.limit, cfg.load) for model in cfg.models for task in cfg.task_names]
    done = {job: found for job in jobs if (found := _finished(context.workdir, job)) is not None}
    todo = [job for job in jobs if job not in done]
    if context.workdir is None:
        ran = [run_job(job) for job in todo]
    else:
        keep = lambda job, entry: _keep(context.workdir, job, entry)  # noqa: E731
        label = lambda job: f"{job.label}: {job.task}"  # noqa: E731
        ran = launch(run_job, todo, context.launcher or LOCAL, context.workdir, 1, desc="bench", label=label, on_result=keep)
    entries = {**done, **dict(zip(todo, ran))}
    here = provenance()
    models = []
    for model in cfg.models:
        mine = {job.task: {k: v for k, v in entries[job].items() if k != "fingerprint"} for job in jobs if job.model == model}
        models.append(model_results(model, model_label(model), cfg.suite, cfg.limit, mine, here))
    return RunResult(stamped("bench", summarise(cfg.suite, cfg.limit, models, cfg.task_names)))


def _slug(label: str) -> str:
    """A model's label as a file name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-.")[:80] or "model"


def _job_path(workdir: Path, job: BenchJob) -> Path:
    return workdir / JOBS_DIR / _slug(job.label) / f"{job.task}.json"


def _finished(workdir: Optional[Path], job: BenchJob) -> Optional[dict]:
    """The job's kept entry when it measured this model (the same files) with this task's version
    and configuration (whatever sinklab commit measured it: a task's version is what says its
    numbers are comparable; each entry's ``where`` names the commit)."""
    path = None if workdir is None else _job_path(workdir, job)
    if path is None or not path.exists():
        return None
    kept = json.loads(path.read_text(encoding="utf-8"))
    entry = kept["entry"]
    same_model = kept.get("model") == job.model and entry.get("fingerprint") == job.fingerprint()
    same_task = entry["version"] == TASKS[job.task].version and entry["config"] == job.config()
    return entry if same_model and same_task and entry["not_applicable"] is None else None  # n/a: checked again


def _keep(workdir: Path, job: BenchJob, entry: dict) -> None:
    path = _job_path(workdir, job)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {"model": job.model, "task": job.task, "entry": entry})


def task_card(name: str) -> dict:
    """What a results reader needs to know of a task: its version, group, title, paper, headline."""
    task = TASKS[name]
    return {"version": task.version, "group": task.group, "title": task.title, "paper": task.paper, "headline": task.headline}


def summarise(suite: str, limit: Optional[str], models: list[dict], task_names, sources: Optional[list] = None) -> dict:
    return {
        "suite": suite,
        "limit": limit,
        "groups": GROUPS,
        "tasks": {name: task_card(name) for name in task_names},
        "models": models,
        "sources": sources,
    }


def write(out: Path, result: RunResult) -> list[str]:
    """Each model's results file (``results/<label>.json``; files of models no longer in the run
    removed) and the leaderboard as CSV."""
    folder = out / RESULTS_DIR
    folder.mkdir(exist_ok=True)
    wanted = {f"{i}-{_slug(results['label'])}.json": results for i, results in enumerate(result.summary["models"])}
    for stale in folder.glob("*.json"):
        if stale.name not in wanted:
            stale.unlink()
    for name, results in wanted.items():
        write_json(folder / name, results)
    return [*(f"{RESULTS_DIR}/{name}" for name in wanted), *write_csv(out, result.summary)]


def resumable(run_dir: Path) -> bool:
    return (run_dir / JOBS_DIR).is_dir()


def keeps_what_was_measured(cfg: BenchConfig, context: RunContext) -> None:
    """Refuse, before the run directory is claimed, a run that would drop what the directory
    measured: its results files, leaderboard and page would be rewritten without a model or task it
    holds, or with numbers of another suite, limit or model loading in their place. A run that
    adds models or tasks goes on (it reuses the jobs measured); ``--overwrite`` replaces the run."""
    if context.workdir is None or context.overwrite or run_differs(context.workdir, cfg) is None:
        return
    saved = json.loads(json.dumps(jsonable(migrate(BenchConfig, json.loads((context.workdir / CONFIG).read_text())))))
    dropped = _dropped(saved, cfg)
    check(
        dropped is None,
        f"{context.workdir} holds a bench run that this one would drop results of ({dropped}); "
        "pass --overwrite to replace it, or choose another --out",
    )


def _dropped(saved: dict, cfg: BenchConfig) -> Optional[str]:
    """What a run of ``cfg`` would drop of the run whose config.json is ``saved``: the first
    setting other than the models and tasks that differs, else the models or tasks it leaves out."""
    now = json.loads(json.dumps(config_record(cfg)))
    rest = [{k: v for k, v in config.items() if k not in ("models", "tasks")} for config in (saved, now)]
    differs = first_difference(*rest, not_result_paths(BenchConfig))
    if differs is not None:
        return differs
    here = {model_label(m) for m in cfg.models}
    models = [model_label(m) for m in saved.get("models", []) if model_label(m) not in here]
    if models:
        return f"models measured there and left out now: {', '.join(models)}"
    tasks = [t for t in saved.get("tasks") or SUITES.get(saved.get("suite"), ()) if t not in cfg.task_names]
    return f"tasks measured there and left out now: {', '.join(tasks)}" if tasks else None


BENCH = register(
    Capability(
        "bench",
        BenchConfig,
        measure,
        write,
        tables=BENCH_TABLES,
        write_page=plots.write_page,
        resumable=resumable,
        holds_runs=True,
        figures=lambda result: plots.figures(result.summary),
        sections=plots.sections,
        preflight=keeps_what_was_measured,
    )
)


# --------------------------------------------------------------------------- --compare


@dataclass
class BenchCompareConfig:
    """``sinklab bench --compare``'s settings: the bench runs (or results files) merged."""

    runs: tuple[str, ...] = setting((), help="bench run directories or results files", cli=False)

    def __post_init__(self) -> None:
        check(self.runs, "--compare needs at least one bench run directory or results file")


def compare(cfg: BenchCompareConfig, context: RunContext = RunContext()) -> RunResult:
    """One leaderboard from results made on different machines, once they line up (:func:`lined_up`)."""
    models = lined_up(cfg)
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
    different values by a task at one version. Also ``--compare``'s preflight, so a refusal
    leaves ``--out`` as it was."""
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
    check_one_result_per_version([(file, results) for _, file, results in found])
    return [{**results, "label": model_label(results["model"]), "source": str(run)} for run, _, results in found]


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
    preflight=lambda cfg, context: lined_up(cfg),
)
