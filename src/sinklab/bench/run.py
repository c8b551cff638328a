"""``sinklab bench``: a versioned suite of sink measurements run on any models, one job per
(model, task) through the launchers, each model's results in a results file, and a leaderboard.

With a run directory every finished job is kept in ``jobs/<model>/<task>.json`` (with the task's
version and configuration), so a stopped run resumes with the jobs left, and a run with more
models or tasks reuses those already measured; a run that would drop what the directory measured
(a model or a task left out, another suite, limit or load options) is refused before anything is
written (:func:`keeps_what_was_measured`). ``sinklab bench --compare`` (:mod:`.compare`)
merges the results files of runs made elsewhere into one leaderboard.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Optional

from ..core.atomic import write_json
from ..core.configs import first_difference, not_result_paths, setting
from ..core.errors import check
from ..core.launchers import LOCAL, launch
from ..core.progress import progress_bar
from ..core.results import Capability, RunContext, RunResult, register, stamped
from ..core.runs import CONFIG, config_record, read_config
from ..models.hf import DEFAULT_MODEL, MODEL_HELP, LoadOptions, default_gguf_path
from ..models.subjects import Subject
from ..scan import label_of
from . import plots
from .frame import BENCH_TABLES, model_label, write_csv
from .results import RESULTS_DIR, model_results, provenance
from .task import GROUPS, LIMITS, TASKS
from .tasks import DEFAULT_SUITE, SUITES

JOBS_DIR = "jobs"


def suite_tasks_help() -> str:
    """Each suite's tasks for ``--tasks``'s help: the default suite's, then what each other suite adds."""
    base = set(SUITES[DEFAULT_SUITE])
    others = [
        f"{name} adds {', '.join(t for t in tasks if t not in base)}" for name, tasks in SUITES.items() if name != DEFAULT_SUITE
    ]
    return "; ".join([f"{DEFAULT_SUITE}: {', '.join(SUITES[DEFAULT_SUITE])}", *others])


@dataclass
class BenchConfig:
    """``sinklab bench``'s settings (and ``sinklab.bench_models``' keyword arguments)."""

    VERSION: ClassVar[int] = 1

    models: tuple = setting((None,), help=f"the models: {MODEL_HELP}", cli=False)
    suite: str = setting(DEFAULT_SUITE, choices=SUITES.keys(), help="the suite of tasks")  # read when a parser is built
    tasks: tuple[str, ...] = setting(
        (),
        metavar="T[,T...]",
        shown="the suite's",
        help=f"only these tasks of the suite ({suite_tasks_help()})",
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
        return model_label(self.model)

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


def run_job(job: BenchJob, subject: Optional[Subject] = None) -> dict:
    """A task on a model (loaded by name, or the model object ``subject``): its results-file
    entry, with where it ran and what the model was."""
    entry = TASKS[job.task].run(job.model, job.load, job.limit, subject)
    return {**entry, "where": provenance(), "fingerprint": job.fingerprint() if subject is None else None}


def measure(cfg: BenchConfig, context: RunContext = RunContext()) -> RunResult:
    """Every (model, task) job, then one results file per model. Models given as objects
    (``context.subject``: one per model, None where it is named) are measured here, in this
    process; named ones on the launcher."""
    given = dict(zip(cfg.models, context.subject)) if context.subject is not None else {}
    objects = {model: subject for model, subject in given.items() if subject is not None}
    check(
        not objects or context.launcher is None or context.launcher.runs_here,
        "a model object is measured in this process: give the models by name to run them on a launcher",
    )
    jobs = [BenchJob(model, task, cfg.limit, cfg.load) for model in cfg.models for task in cfg.task_names]
    done = {job: found for job in jobs if (found := _finished(context.workdir, job, job.model in objects)) is not None}
    todo = [job for job in jobs if job not in done]
    keep = (lambda job, entry: _keep(context.workdir, job, entry)) if context.workdir is not None else None  # noqa: E731
    here = [job for job in todo if job.model in objects or context.workdir is None]
    named = [job for job in todo if job not in here]
    ran = {}
    for job in progress_bar(here, desc="bench", unit="job"):
        ran[job] = run_job(job, objects.get(job.model))
        if keep is not None:
            keep(job, ran[job])
    if named:
        label = lambda job: f"{job.label}: {job.task}"  # noqa: E731
        entries = launch(run_job, named, context.launcher or LOCAL, context.workdir, 1, desc="bench", label=label, on_result=keep)
        ran.update(zip(named, entries))
    entries = {**done, **ran}
    where = provenance()
    models = []
    for model in cfg.models:
        mine = {job.task: {k: v for k, v in entries[job].items() if k != "fingerprint"} for job in jobs if job.model == model}
        models.append(model_results(model, model_label(model), cfg.suite, cfg.limit, mine, where))
    return RunResult(stamped("bench", summarise(cfg.suite, cfg.limit, models, cfg.task_names)))


def _slug(label: str) -> str:
    """A model's label as a file name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-.")[:80] or "model"


def _job_path(workdir: Path, job: BenchJob, label: Optional[str] = None) -> Path:
    return workdir / JOBS_DIR / _slug(label or job.label) / f"{job.task}.json"


def _kept_path(workdir: Path, job: BenchJob) -> Optional[Path]:
    """Where the job's kept entry is: under its label, or under ``default/``, where runs made
    before the default model was labelled ``smollm2`` kept it (None: not kept)."""
    paths = (_job_path(workdir, job), _job_path(workdir, job, label_of(job.model)))
    return next((path for path in paths if path.exists()), None)


def _finished(workdir: Optional[Path], job: BenchJob, an_object: bool = False) -> Optional[dict]:
    """The job's kept entry when it measured this model (the same files) with this task's version
    and configuration (whatever sinklab commit measured it: a task's version is what says its
    numbers are comparable; each entry's ``where`` names the commit). A model object's files
    are not known: it is measured again."""
    path = None if workdir is None or an_object else _kept_path(workdir, job)
    if path is None:
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
    wanted = {
        f"{i}-{_slug(results['label']).removesuffix('.json')}.json": results for i, results in enumerate(result.summary["models"])
    }
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
    holds, or with numbers of another suite, limit or model loading in their place; and a directory
    that holds another kind of run (a bench run resumes under another configuration, so the
    ``--out`` policy lets it in). A run that adds models or tasks goes on (it reuses the jobs
    measured); ``--overwrite`` replaces the run."""
    found = None if context.workdir is None or context.overwrite else read_config(context.workdir)
    if found is None:
        return
    check(
        isinstance(found, dict) and {"suite", "models"} <= found.keys(),  # what every bench config.json holds
        f"{context.workdir} holds a run that is not a sinklab bench run (its {CONFIG} is not a bench configuration); "
        "choose another --out, or pass --overwrite to replace it",
    )
    saved, now = read_config(context.workdir, BenchConfig), json.loads(json.dumps(config_record(cfg)))
    dropped = _dropped(saved, now, cfg)
    check(
        dropped is None,
        f"{context.workdir} holds a bench run that this one would drop results of ({dropped}); "
        "pass --overwrite to replace it, or choose another --out",
    )


def _dropped(saved: dict, now: dict, cfg: BenchConfig) -> Optional[str]:
    """What a run of ``cfg`` (its config.json ``now``) would drop of the run whose config.json is
    ``saved``: the first setting other than the models and tasks that differs, else the models or
    tasks it leaves out."""
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
