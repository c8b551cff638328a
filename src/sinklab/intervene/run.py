"""``sinklab intervene`` and ``sinklab.intervene_model``: interventions on a model, every metric
before and after (the ``INTERVENE`` capability of the one pipeline).

:func:`apply_interventions` is the one runner: it attaches the interventions' hooks next to the
scanner's recorder and returns the scanner's :class:`~sinklab.recorder.Record` plus the
next-token loss, so anything the scanner measures is available before and after an edit.

With ``--accuracy`` the run directory also holds the judge's scores in lm-eval's own files
(``lm_eval_results.json`` and ``samples_<task>_<run>.jsonl``, :mod:`.judged`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Collection, Optional, Sequence

import torch

from ..accuracy import (
    EVERY,
    ROTATIONS_HELP,
    SIZES,
    check_judge_flags,
    check_prompts_fit,
    check_rotations,
    check_tasks,
    migrated_judge,
    sizes_for,
    split_rule_setting,
    task_names,
)
from ..core.configs import changed, recorded, setting
from ..core.errors import check, refuse_unread
from ..core.results import Capability, RunContext, RunResult, register, stamped
from ..models.hf import MODEL_HELP, QUERY_CHUNK, LoadOptions, read_header
from ..models.subjects import HFSubject, Subject
from ..scan import InputSpec, Record, RecordOptions, record_subject, renamed_max_tokens, scan_inputs
from . import page, plots
from .experiments import Experiment, hooks_of, interventions_for, validate_all
from .frame import INTERVENE_TABLES
from .interventions import MU_DEFINITION, Intervention
from .judged import judge_accuracy


def apply_interventions(
    subject: Subject, ids: torch.Tensor, interventions: Sequence[Intervention], options: RecordOptions, progress: bool = False
) -> tuple[Record, float]:
    """Run ``subject`` on ``ids`` with ``interventions`` applied; return (record, mean loss)."""
    validate_all(interventions, subject.n_layers, subject.n_heads, ids.shape[1])
    record, loss = record_subject(subject, ids, options, extra_hooks=hooks_of(interventions, subject.n_heads), progress=progress)
    return record, loss.item()


def share_at(record: Record, k: int) -> list[float]:
    """Per layer: the mean attention that queries after k give to key k (heads averaged)."""
    column = record.columns[k]  # (L, H, T)
    check(k + 1 < column.shape[-1], f"position {k} has no later queries in a {column.shape[-1]}-token input")
    return column[..., k + 1 :].mean(-1).mean(-1).tolist()


def migrated_edits(saved: dict) -> dict:
    """Runs before config version 1 recorded command-line options (``edits``, ``lams``, ``layers``,
    ``heads``); version 1 records the interventions they asked for."""
    saved = recorded(saved, ("inputs", "edits", "lams", "layers", "heads"), 0)
    asked = interventions_for(saved["edits"], saved["lams"], saved["layers"], saved["heads"]) if saved["edits"] else []
    kept = {k: v for k, v in saved.items() if k not in ("edits", "lams", "layers", "heads", "experiments", "mu")}
    return {**kept, "inputs": renamed_max_tokens(saved["inputs"]), "interventions": [iv.to_record() for iv in asked]}


#: The summary's schema: 3, accuracy asked under every order of the listed choices (``rotations``),
#: rotation-averaged and strict accuracy, the gold log-probability among the choices, the sign-flip p.
SCHEMA_VERSION = 3


@dataclass
class InterveneConfig:
    """``sinklab intervene``'s settings (and ``sinklab.intervene_model``'s keyword arguments).
    ``interventions``: one run each, an :class:`Intervention` or a tuple of them applied together."""

    VERSION: ClassVar[int] = 3
    MIGRATIONS: ClassVar[dict] = {
        0: migrated_edits,
        1: lambda saved: {**saved, "accuracy": [], "accuracy_shots": 0, "accuracy_test": SIZES["test"]},
        2: migrated_judge,
    }

    model: Optional[str] = setting(None, help=MODEL_HELP, cli=False)
    inputs: InputSpec = field(default_factory=InputSpec)
    interventions: tuple = setting((), help="the interventions, one run each (a tuple of them is applied together)", cli=False)
    accuracy: tuple[str, ...] = setting(
        (),
        metavar="T[,T...]",
        parse=task_names,
        help="BIG-bench tasks (names or task.json paths; suite: the suite's) whose test-split accuracy is judged intact "
        "against every experiment (lm-eval, paired); none by default",
    )
    accuracy_shots: int = setting(0, help="shots per --accuracy prompt, from the task's own examples")
    accuracy_test: int = setting(SIZES["test"], help="test examples per --accuracy task")
    accuracy_rotations: int = setting(EVERY, help=ROTATIONS_HELP)
    splits: int = split_rule_setting()
    query_chunk: int = setting(QUERY_CHUNK, help="query rows attended at once; bounds memory on long inputs", result=False)
    load: LoadOptions = field(default_factory=LoadOptions)

    def __post_init__(self) -> None:
        self.interventions = tuple(_from_record(given) for given in self.interventions)
        self.accuracy = task_names(self.accuracy)  # accuracy="suite" as the flag reads it
        if self.accuracy:
            check_judge_flags(self.accuracy_shots, self.accuracy_test, self.inputs.bos)
            check_rotations(self.accuracy_rotations, "--accuracy-rotations")
        check_accuracy_read(changed(self, ACCURACY_SETTINGS), self.accuracy)

    @property
    def accuracy_sizes(self) -> dict:
        """The --accuracy tasks' splits: test and the shot pool (nothing is tuned: no validation)."""
        return sizes_for(self.accuracy_shots, 0, self.accuracy_test)

    def experiments(self) -> list[Experiment]:
        check(bool(self.interventions), "name at least one intervention")
        return [Experiment.of(given) for given in self.interventions]


#: The settings read only with ``--accuracy`` (given without it, the run exited 0 having judged nothing).
ACCURACY_SETTINGS = ("accuracy_shots", "accuracy_test", "accuracy_rotations")


def check_accuracy_read(given: Collection[str], accuracy) -> None:
    """Refuse, in one line, a setting of :data:`ACCURACY_SETTINGS` given (``given``: their names)
    with no ``accuracy`` tasks to judge."""
    refuse_unread(given, {name: (bool(accuracy), "--accuracy TASKS") for name in ACCURACY_SETTINGS})


def _from_record(given):
    """An intervention (or tuple of them) as given, or as a configuration recorded it."""
    if isinstance(given, dict):
        return Intervention.from_record(given)
    if isinstance(given, (list, tuple)):
        return tuple(_from_record(item) for item in given)
    return given


def _entry(record: Record, loss: float, ks: Sequence[int]) -> dict:
    return {
        "share_at_0": share_at(record, 0),
        "share_at": {str(k): share_at(record, k) for k in ks},
        "loss": loss,
        "ppl": math.exp(min(loss, 50.0)),
    }


def measure(cfg: InterveneConfig, context: RunContext = RunContext()) -> RunResult:
    """Baseline plus every experiment, in memory: the summary, and as data the head-averaged
    attention maps (L, T, T) before and after the strongest experiment of each kind (inputs of at
    most 256 tokens)."""
    experiments = cfg.experiments()
    subject = context.subject or HFSubject(cfg.load.load(cfg.model), cfg.query_chunk)
    ids = scan_inputs(subject, cfg.inputs).ids
    for exp in experiments:  # fail before any work on a bad position, layer or head
        validate_all(exp.interventions, subject.n_layers, subject.n_heads, ids.shape[1])
    ks = sorted({0, *(e.k for e in experiments)})
    options = RecordOptions(key_columns=tuple(ks), patterns=ids.shape[1] <= 256)
    base_record, base_loss = apply_interventions(subject, ids, (), options, progress=True)
    baseline = {
        "k": experiments[0].k,
        "share_at_k": share_at(base_record, experiments[0].k),
        **_entry(base_record, base_loss, ks),
    }
    results, records = [], {}
    for exp in experiments:
        record, loss = apply_interventions(subject, ids, exp.interventions, options, progress=True)
        records[exp.label] = record
        described = [iv.describe() for iv in exp.interventions]
        results.append(
            {
                "label": exp.label,
                "intervention": described[0] if len(described) == 1 else described,
                "lam": exp.lam,
                "k": exp.k,
                "share_at_k": share_at(record, exp.k),
                **_entry(record, loss, ks),
            }
        )
    summary = {
        "model": subject.name,
        "architecture": getattr(subject, "architecture", type(subject).__name__),
        **subject.facts(),
        "layers": subject.n_layers,
        "tokens": ids.shape[1],
        "sequences": ids.shape[0],
        "mu": MU_DEFINITION,
        "baseline": baseline,
        "results": results,
    }
    data = {}
    if cfg.accuracy:
        summary["accuracy"], data["lm_eval"] = judge_accuracy(subject, experiments, cfg)
    return RunResult(stamped("intervene", summary, SCHEMA_VERSION), {**plots.data_from(base_record, records, summary), **data})


def preflight(cfg: InterveneConfig, context: RunContext) -> None:
    """The --accuracy tasks, the model's BOS and the prompts within its positions, before the run directory is claimed."""
    if cfg.accuracy:
        header = context.subject if context.subject is not None else read_header(cfg.model, cfg.load)
        tasks = check_tasks(cfg.accuracy, header.tokenizer, cfg.accuracy_sizes)
        check_prompts_fit(tasks, header.tokenizer, cfg.accuracy_shots, cfg.accuracy_sizes, header.max_positions)


def write(out: Path, result: RunResult) -> list[str]:
    """The maps, and with ``--accuracy`` the judge's scores as lm-eval's files (``lm_eval_results.json``,
    ``samples_*.jsonl``); the figures, summary.json and the page are the pipeline's."""
    plots.save_data(out, result.data)
    names = [plots.MAPS_FILE] if result.data["maps"] else []
    if result.summary.get("accuracy"):
        check("lm_eval" in result.data, "this intervene result holds no lm-eval output to write (measure it with --accuracy)")
        names += result.data["lm_eval"].write(out)
    return names


INTERVENE = register(
    Capability(
        "intervene",
        InterveneConfig,
        measure,
        write,
        tables=INTERVENE_TABLES,
        write_page=page.write,
        read_data=plots.read_data,
        figures=lambda result: plots.figures(result.summary, result.data),
        sections=plots.sections,
        preflight=preflight,
    )
)
