"""``sinklab compress``: the keep-sink table. Every press at every ratio, with and without its
sinks kept, and every KV quantizer at every bit width, with and without the sink protected,
judged by compressed-context perplexity and passkey retrieval against the full cache, and with
``--accuracy`` by multiple-choice accuracy on BIG-bench tasks whose shots are compressed (:mod:`.judged`).

One job per press or quantizer (its whole row: every cell, context and input; see
:mod:`.evaluate` for why a row costs about one prefill per input), plus one for the dense cache,
through the launchers. With a run directory each finished job's cells are kept in
``presses/<name>.json``, so a stopped run resumes with the jobs left.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar, Optional

from ..accuracy import SIZES, check_judge_flags, task_names
from ..core.configs import setting
from ..core.errors import check
from ..core.launchers import LOCAL, launch
from ..core.results import Capability, RunContext, RunResult, register, stamped
from ..core.runs import write_json
from ..kvcache import DETECTED, PRESSES, PROTECTS, QUANTIZERS, check_ratio, policy_named
from ..models.hf import MODEL_HELP, LoadOptions, model_facts
from ..scan import BOS_CHOICES
from . import plots
from .evaluate import score_inputs
from .feasible import check_feasible, model_for, preflight
from .frame import COMPRESS_TABLES
from .judged import score_tasks
from .summary import CELL_GROUP, SCHEMA_VERSION, cell_figures, paired, task_figures
from .tasks import CONTINUATION, DEPTHS, JUDGES, MIN_CONTEXT, calibration_windows, passkey_prompts, positions_read, text_window

JOBS_DIR = "presses"
DENSE = "dense"  # the uncompressed cache's job and row
RATIOS = (0.25, 0.5, 0.75, 0.875)
CALIBRATION = (512, 4)  # static scales: tokens x windows of the corpus, after the text the ppl task reads


def quantizers_help() -> str:
    """Each registered quantizer's bit widths and what it protects, for ``--quant``'s help."""
    return "; ".join(
        f"{name}: {'/'.join(map(str, cls.bit_widths))}-bit, protect {PROTECTS[cls.protects]}" for name, cls in QUANTIZERS.items()
    )


def keep_sinks_list(text: str) -> tuple:
    """``0,1,4,detected`` -> (0, 1, 4, "detected")."""
    values = [t.strip() for t in text.split(",") if t.strip()]
    check(values, "--keep-sinks needs at least one of: a number of first tokens, or 'detected'")
    bad = [v for v in values if v != DETECTED and not v.isdigit()]
    check(not bad, f"--keep-sinks takes numbers of first tokens and 'detected', got {', '.join(bad)}")
    return tuple(v if v == DETECTED else int(v) for v in values)


@dataclass
class CompressConfig:
    """``sinklab compress``'s settings (and ``sinklab.compress_model``'s keyword arguments)."""

    VERSION: ClassVar[int] = 2
    MIGRATIONS: ClassVar[dict] = {1: lambda saved: {**saved, "accuracy": [], "accuracy_shots": 5, "accuracy_test": SIZES["test"]}}

    model: Optional[str] = setting(None, help=MODEL_HELP, cli=False)
    presses: Optional[tuple[str, ...]] = setting(
        None,
        flag="--press",
        metavar="P[,P...]",
        shown="all, or none when only --quant is given",
        help=f"from {', '.join(PRESSES)}; 'none' for quantizers only",
        parse=lambda text: () if text == "none" else tuple(t.strip() for t in text.split(",") if t.strip()),
    )
    ratios: tuple[float, ...] = setting(
        RATIOS, flag="--ratio", metavar="R[,R...]", help="fractions of the context removed, in [0, 1) (0: the full cache)"
    )
    keep_sinks: tuple = setting(
        (0, 1, 4, DETECTED),
        parse=keep_sinks_list,
        metavar="K[,K...]",
        help="sinks kept inside the budget: numbers of first tokens, and/or 'detected'",
    )
    quantizers: Optional[tuple[str, ...]] = setting(
        None,
        flag="--quant",
        shown=f"{','.join(QUANTIZERS)}, or none when only --press is given",
        choices=tuple(QUANTIZERS),
        metavar="Q[,Q...]",
        help=f"KV quantizers ({quantizers_help()}); 'none' for presses only",
        parse=lambda text: () if text == "none" else tuple(t.strip() for t in text.split(",") if t.strip()),
    )
    bits: tuple[int, ...] = setting((2, 4, 8), metavar="B[,B...]", help="bit widths; each quantizer runs those it takes")
    group_size: int = setting(32, help="KIVI's group: tokens per key scale, channels per value scale (KIVI's paper: 32)")
    residual: int = setting(128, help="KIVI's recent tokens kept in full precision (KIVI's paper: 128)")
    tasks: tuple[str, ...] = setting(JUDGES, flag="--task", choices=JUDGES, metavar="T[,T...]", help="ppl and/or passkey")
    contexts: tuple[int, ...] = setting((2048,), flag="--context", metavar="C[,C...]", help="context lengths in tokens")
    corpus: str = setting("shakespeare", help="the text for ppl: shakespeare, a text file or folder, or hf:NAME")
    outside: Optional[str] = setting(
        "pydoc",
        flag="--outside-corpus",
        metavar="CORPUS",
        parse=lambda text: None if text == "none" else text,
        help="a second text for ppl, of another domain (pydoc: Python's language reference; 'none' skips it)",
    )
    keys: int = setting(2, help="passkeys per depth (depths: 10, 50 and 90 percent of the filler)")
    accuracy: tuple[str, ...] = setting(
        (),
        metavar="T[,T...]",
        parse=task_names,
        help="BIG-bench tasks (names or task.json paths; suite: the suite's) judged by multiple-choice accuracy: "
        "lm-eval's few-shot prompts, their shots the compressed context; none by default",
    )
    accuracy_shots: int = setting(5, help="shots per --accuracy prompt, from the task's own examples: what is compressed")
    accuracy_test: int = setting(SIZES["test"], help="test examples per --accuracy task")
    seed: int = setting(0, help="draws the passkeys (and the random press)")
    bos: str = setting("auto", choices=BOS_CHOICES, help="put the tokenizer's BOS first: yes, no, or auto (when it has one)")
    load: LoadOptions = field(default_factory=LoadOptions)

    def __post_init__(self) -> None:
        self._fill_grid()
        self.accuracy = task_names(self.accuracy)  # accuracy="suite" as the flag reads it
        for ratio in self.ratios:
            check_ratio(ratio, "--ratio")
        for keep in self.keep_sinks:
            check(keep == DETECTED or (isinstance(keep, int) and keep >= 0), f"--keep-sinks: bad value {keep!r}")
        for context in self.contexts:
            check(context >= MIN_CONTEXT, f"--context must be at least {MIN_CONTEXT} tokens, got {context}")
        check(self.keys >= 1, f"--keys must be at least 1, got {self.keys}")
        if self.accuracy:  # at least one shot: the shots are the context a press compresses
            check_judge_flags(self.accuracy_shots, self.accuracy_test, self.bos, min_shots=1)
        unknown = [p for p in self.presses if p not in PRESSES]
        check(not unknown, f"unknown press {', '.join(unknown)}; choose from: {', '.join(PRESSES)}")
        unknown = [q for q in self.quantizers if q not in QUANTIZERS]
        check(not unknown, f"unknown quantizer {', '.join(unknown)}; choose from: {', '.join(QUANTIZERS)}")
        check(self.presses or self.quantizers, "give at least one press or quantizer")
        for name in self.quantizers:
            check(
                self.quantizer_bits(name) and self.protections(name),
                f"--quant {name} has nothing to run: it takes --bits {','.join(map(str, QUANTIZERS[name].bit_widths))} "
                f"and protects {PROTECTS[QUANTIZERS[name].protects]}; got --bits {','.join(map(str, self.bits))} "
                f"--keep-sinks {','.join(map(str, self.keep_sinks))}",
            )

    def _fill_grid(self) -> None:
        """Presses and quantizers left out (None): naming some of one kind runs that kind only (a
        presses-only table never pays for the quantizers, nor the reverse); otherwise a kind left
        out runs all of it (the default grid; ``--press none`` alone: every quantizer)."""
        presses, quantizers = self.presses, self.quantizers
        if presses is None:
            self.presses = () if quantizers else tuple(PRESSES)
        if quantizers is None:
            self.quantizers = () if presses else tuple(QUANTIZERS)

    @property
    def positions(self) -> int:
        """The positions the run feeds the model (:func:`~.tasks.positions_read`)."""
        return positions_read(self.contexts)

    def press_grid(self) -> list[tuple]:
        """A press's (ratio, keep_sinks) cells. Ratio 0 evicts nothing, so it is the dense cache
        whatever the sinks kept: one cell (keep_sinks 0), never a fake pair of the sink effect."""
        return [(r, k) for r in self.ratios for k in (self.keep_sinks if r else (0,))]

    def press_cells(self, name: str) -> dict:
        """A press's row: cell name ("ratio/keep_sinks") -> the press."""
        base = policy_named(name, **({"seed": self.seed} if name == "random" else {}))
        return {f"{r:g}/{k}": replace(base, ratio=r, keep_sinks=k) for r, k in self.press_grid()}

    def quantizer_bits(self, name: str) -> list[int]:
        return [b for b in self.bits if b in QUANTIZERS[name].bit_widths]

    def protections(self, name: str) -> list:
        """The protect settings of ``--keep-sinks`` a quantizer takes (quanto none, static numbers only)."""
        return QUANTIZERS[name].protections(self.keep_sinks)


@dataclass(frozen=True)
class PressJob:
    """One row of the table: a press (or the dense cache) over every input."""

    cfg: CompressConfig
    press: str


def run_job(job: PressJob, subject=None) -> dict:
    """A row of the table: {context|input: {cell: scores}}; the dense job scores ratio 0."""
    loaded = model_for(job.cfg, subject)
    check_feasible(job.cfg, loaded)  # again: a cluster's job loads the model the preflight only read the header of
    cfg, tokenizer = job.cfg, loaded.tokenizer
    rows: dict = defaultdict(dict)
    policies = job_policies(job, loaded)
    for context in cfg.contexts:
        texts = [cfg.corpus, *([cfg.outside] if cfg.outside else [])] if "ppl" in cfg.tasks else []
        windows = [text_window(tokenizer, text, context, cfg.bos) for text in texts]
        prompts = passkey_prompts(tokenizer, context, cfg.keys, cfg.seed, cfg.bos) if "passkey" in cfg.tasks else []
        for name, cell, scores in score_inputs(loaded.model, tokenizer, policies, windows, prompts):
            rows[f"{context}|{name}"][cell] = scores
    if cfg.accuracy:  # one judge for every context: its context is the shots
        for name, cell, scores in score_tasks(
            loaded.model, tokenizer, policies, cfg.accuracy, cfg.accuracy_shots, cfg.accuracy_test
        ):
            rows[name][cell] = scores
    return {"facts": {"model": loaded.name, **model_facts(loaded.model)}, "rows": dict(rows)}


def job_policies(job: PressJob, loaded) -> dict:
    """The job's cells: cell name -> policy (a press, or a quantizer at "bits/protect")."""
    cfg = job.cfg
    if job.press == DENSE:
        return {"0/0": policy_named("knorm")}  # ratio 0: the full cache
    if job.press in PRESSES:
        return cfg.press_cells(job.press)
    cells = {}
    for bits in cfg.quantizer_bits(job.press):
        for protect in cfg.protections(job.press):
            cells[f"{bits}/{protect}"] = quantizer(job.press, bits, protect, cfg, loaded)
    return cells


def quantizer(name: str, bits: int, protect, cfg: CompressConfig, loaded):
    """The quantizer ``name`` at ``bits`` and ``protect``, with the run's settings it takes, fitted
    to the model where it needs it (static scales: calibrated after the text the ppl task reads)."""
    cls = QUANTIZERS[name]
    policy = cls(bits=bits, protect=protect, **{key: getattr(cfg, key) for key in cls.run_settings})
    if not cls.calibrates:
        return policy
    skip = max(cfg.contexts) + CONTINUATION + 1  # the ppl windows' tokens (targets too): never calibrated on
    return policy.calibrated(loaded.model, calibration_windows(loaded.tokenizer, cfg.corpus, skip, *CALIBRATION))


def measure(cfg: CompressConfig, context: RunContext = RunContext()) -> RunResult:
    """Every press's row (and the dense cache's), then the table."""
    jobs = [PressJob(cfg, name) for name in (DENSE, *cfg.presses, *cfg.quantizers)]
    done = _finished_jobs(context.workdir) if context.resume else {}
    todo = [job for job in jobs if job.press not in done]
    if context.subject is not None or context.workdir is None:
        ran = [run_job(job, context.subject) for job in todo]
        for job, result in zip(todo, ran):
            _keep(context.workdir, job, result)
    else:
        ran = launch(run_job, todo, context.launcher or LOCAL, context.workdir, 1, desc="presses", label=lambda j: j.press,
                     on_result=lambda job, result: _keep(context.workdir, job, result))  # fmt: skip
    results = {**done, **{job.press: result for job, result in zip(todo, ran)}}
    return RunResult(stamped("compress", summarise(cfg, results), SCHEMA_VERSION))


def _finished_jobs(workdir: Optional[Path]) -> dict:
    found = {}
    for path in sorted((workdir / JOBS_DIR).glob("*.json")) if workdir is not None else []:
        found[path.stem] = json.loads(path.read_text())
    return found


def _keep(workdir: Optional[Path], job: PressJob, result: dict) -> None:
    if workdir is not None:
        (workdir / JOBS_DIR).mkdir(exist_ok=True)
        write_json(workdir / JOBS_DIR / f"{job.press}.json", result)


def summarise(cfg: CompressConfig, results: dict) -> dict:
    """The summary: the dense cache's figures, one cell per (press, ratio, keep_sinks, context) and
    per (quantizer, bits, protect, context) in one schema (``cells``: ``policy``, its ``kind``, the
    ``ratio`` of a press and the ``bits`` of a quantizer, None for the other, and ``keep_sinks``, a
    quantizer's protect), and the paired comparisons against keeping no sink (``sink_effect``)."""
    dense = {str(c): task_figures(results[DENSE]["rows"], c, "0/0") for c in cfg.contexts}
    grid = [(name, "press", r, None, k, f"{r:g}/{k}") for name in cfg.presses for r, k in cfg.press_grid()]
    grid += [
        (name, "quantizer", None, b, p, f"{b}/{p}")
        for name in cfg.quantizers
        for b in cfg.quantizer_bits(name)
        for p in cfg.protections(name)
    ]
    cells = [
        {"policy": name, "kind": kind, "ratio": r, "bits": b, "keep_sinks": k, "context": c,
         **cell_figures(results[name]["rows"], c, key, dense)}
        for name, kind, r, b, k, key in grid
        for c in cfg.contexts
    ]  # fmt: skip
    return {
        **results[DENSE]["facts"],
        "presses": list(cfg.presses),
        "ratios": list(cfg.ratios),
        "keep_sinks": list(cfg.keep_sinks),
        "quantizers": list(cfg.quantizers),
        "contexts": list(cfg.contexts),
        "tasks": list(cfg.tasks),
        "corpus": cfg.corpus,
        "outside": cfg.outside,
        "continuation": CONTINUATION,
        "passkey": {"depths": list(DEPTHS), "keys_per_depth": cfg.keys, "seed": cfg.seed},
        "accuracy": {"tasks": list(cfg.accuracy), "shots": cfg.accuracy_shots, "test": cfg.accuracy_test}
        if cfg.accuracy
        else None,
        "dense": dense,
        "cells": cells,
        "sink_effect": paired(cells, CELL_GROUP, "keep_sinks"),
    }


def write(out: Path, result: RunResult) -> list[str]:
    """Nothing beyond the summary (the per-press rows are already under presses/)."""
    return []


def resumable(run_dir: Path) -> bool:
    return (run_dir / JOBS_DIR).is_dir()


COMPRESS = register(
    Capability(
        "compress",
        CompressConfig,
        measure,
        write,
        tables=COMPRESS_TABLES,
        write_page=plots.write_page,
        resumable=resumable,
        figures=lambda result: plots.figures(result.summary),
        sections=plots.sections,
        preflight=preflight,
    )
)
