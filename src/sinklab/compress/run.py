"""``sinklab compress``: the keep-sink table. Every press at every ratio, with and without its
sinks kept, and every KV quantizer at every bit width, with and without the sink protected,
judged by compressed-context perplexity and passkey retrieval against the full cache, and with
``--accuracy`` by multiple-choice accuracy on BIG-bench tasks whose shots are compressed (:mod:`.judged`).

One job per press or quantizer (its whole row: every cell, context and input; see
:mod:`.evaluate` for why a row costs about one prefill per input), plus one for the dense cache,
through the launchers. With a run directory each finished job's cells are kept in
``presses/<name>.json``, so a stopped run resumes with the jobs left (a kept job of an ``--accuracy``
run without lm-eval's output, kept before sinklab wrote lm-eval's files, is run again).

With ``--accuracy`` the run directory also holds the judge's scores in lm-eval's own files:
``lm_eval_results.json`` and ``samples_<task>_<policy>_<cell>.jsonl`` (:mod:`.judged`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..core.atomic import write_json
from ..core.errors import check
from ..core.launchers import LOCAL, launch
from ..core.results import Capability, RunContext, RunResult, register, stamped
from ..kvcache import QUANTIZERS, policy_named
from ..models.hf import model_facts
from . import page, plots
from .config import CompressConfig
from .evaluate import score_decoding, score_inputs
from .feasible import check_feasible, model_for, preflight
from .frame import COMPRESS_TABLES
from .judged import lm_eval_files, score_tasks
from .summary import CELL_GROUP, SCHEMA_VERSION, cell_figures, paired, task_figures
from .tasks import (
    CONTINUATION,
    DEPTHS,
    PASSKEY_FILLER,
    calibration_windows,
    passkey_prompts,
    text_window,
)  # fmt: skip

JOBS_DIR = "presses"
DENSE = "dense"  # the uncompressed cache's job and row
CALIBRATION = (512, 4)  # static scales: tokens x windows of the corpus, after the text the ppl task reads


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
    decoding = cfg.during == "decode"
    scored, after = (cfg.decode_tokens, PASSKEY_FILLER) if decoding else (CONTINUATION, 0)
    for context in cfg.contexts:
        texts = [cfg.corpus, *([cfg.outside] if cfg.outside else [])] if "ppl" in cfg.tasks else []
        windows = [text_window(tokenizer, text, context, cfg.bos, scored) for text in texts]
        prompts = passkey_prompts(tokenizer, context, cfg.keys, cfg.seed, cfg.bos, after) if "passkey" in cfg.tasks else []
        if decoding:
            found = score_decoding(loaded.model, tokenizer, policies, windows, prompts, cfg.every)
        else:
            found = score_inputs(loaded.model, tokenizer, policies, windows, prompts)
        for name, cell, scores in found:
            rows[f"{context}|{name}"][cell] = scores
    outputs: dict = defaultdict(dict)
    if cfg.accuracy:  # one judge for every context: its context is the shots
        for name, cell, scores, output in score_tasks(loaded.model, tokenizer, policies, cfg):
            rows[name][cell] = scores
            outputs[name][cell] = output
    return {"facts": {"model": loaded.name, **model_facts(loaded.model)}, "rows": dict(rows), "lm_eval": dict(outputs)}


def job_policies(job: PressJob, loaded) -> dict:
    """The job's cells: cell name -> policy (a press, or a quantizer at "bits/protect")."""
    cfg = job.cfg
    if job.press == DENSE:  # the full cache: ratio 0, or no decoding press
        return {"0/0": None if cfg.during == "decode" else policy_named("knorm")}
    if job.press in cfg.presses:
        return cfg.decoding_cells(job.press) if cfg.during == "decode" else cfg.press_cells(job.press)
    cells = {}
    for bits in cfg.quantizer_bits(job.press):
        for protect in cfg.protections(job.press):
            cells[f"{bits}/{protect}"] = quantizer(job.press, bits, protect, cfg, loaded)
    return cells


def quantizer(name: str, bits: int, protect, cfg: CompressConfig, loaded):
    """The quantizer ``name`` at ``bits`` and ``protect``, with the run's settings it takes, fitted
    to the model where it needs it (static scales: calibrated after the text the ppl task reads)."""
    cls = QUANTIZERS[name]
    policy = cls(bits=bits, protect=protect, **cls.run_values(cfg))
    if not cls.calibrates:
        return policy
    skip = max(cfg.contexts) + CONTINUATION + 1  # the ppl windows' tokens (targets too): never calibrated on
    return policy.calibrated(loaded.model, calibration_windows(loaded.tokenizer, cfg.corpus, skip, *CALIBRATION))


def measure(cfg: CompressConfig, context: RunContext = RunContext()) -> RunResult:
    """Every press's row (and the dense cache's), then the table; with ``--accuracy``, as data the
    judge's cells as lm-eval's files hold them (``lm_eval``: :class:`~sinklab.accuracy.LmEvalFiles`)."""
    jobs = [PressJob(cfg, name) for name in (DENSE, *cfg.presses, *cfg.quantizers)]
    done = finished_jobs(context.workdir, bool(cfg.accuracy)) if context.resume else {}
    todo = [job for job in jobs if job.press not in done]
    if context.subject is not None or context.workdir is None:
        ran = [run_job(job, context.subject) for job in todo]
        for job, result in zip(todo, ran):
            _keep(context.workdir, job, result)
    else:
        ran = launch(run_job, todo, context.launcher or LOCAL, context.workdir, 1, desc="presses", label=lambda j: j.press,
                     on_result=lambda job, result: _keep(context.workdir, job, result))  # fmt: skip
    results = {**done, **{job.press: result for job, result in zip(todo, ran)}}
    summary = stamped("compress", summarise(cfg, results), SCHEMA_VERSION)
    in_order = {job.press: results[job.press] for job in jobs}
    return RunResult(summary, {"lm_eval": lm_eval_files(cfg, in_order, summary["model"])} if cfg.accuracy else {})


def finished_jobs(workdir: Optional[Path], accuracy: bool = False) -> dict:
    """The jobs kept under ``presses/`` of ``workdir``, by name; with ``accuracy``, those that carry
    lm-eval's output (``lm_eval``) alone: a job kept before sinklab wrote lm-eval's files is run again."""
    found = {}
    for path in sorted((workdir / JOBS_DIR).glob("*.json")) if workdir is not None else []:
        kept = json.loads(path.read_text())
        if not accuracy or "lm_eval" in kept:
            found[path.stem] = kept
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
    if cfg.during == "decode":
        grid = [(name, "press", None, None, k, f"decode/{k}") for name in cfg.presses for k in cfg.keep_sinks]
    else:
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
        "during": cfg.during,
        "decoding": {"budget": cfg.budget, "every": cfg.every, "tokens": cfg.decode_tokens, "passkey_filler": PASSKEY_FILLER}
        if cfg.during == "decode"
        else None,
        "corpus": cfg.corpus,
        "outside": cfg.outside,
        "continuation": cfg.decode_tokens if cfg.during == "decode" else CONTINUATION,
        "passkey": {"depths": list(DEPTHS), "keys_per_depth": cfg.keys, "seed": cfg.seed},
        "accuracy": {
            "tasks": list(cfg.accuracy),
            "shots": cfg.accuracy_shots,
            "test": cfg.accuracy_test,
            "rotations": cfg.accuracy_rotations,
        }
        if cfg.accuracy
        else None,
        "dense": dense,
        "cells": cells,
        "sink_effect": paired(cells, CELL_GROUP, "keep_sinks"),
    }


def write(out: Path, result: RunResult) -> list[str]:
    """With ``--accuracy``, the judge's scores as lm-eval's files (``lm_eval_results.json``,
    ``samples_*.jsonl``); nothing else beyond the summary (the per-press rows are already under presses/)."""
    if not result.summary.get("accuracy"):
        return []
    check("lm_eval" in result.data, "this compress result holds no lm-eval output to write (measure it with --accuracy)")
    return result.data["lm_eval"].write(out)


def resumable(run_dir: Path) -> bool:
    return (run_dir / JOBS_DIR).is_dir()


COMPRESS = register(
    Capability(
        "compress",
        CompressConfig,
        measure,
        write,
        tables=COMPRESS_TABLES,
        write_page=page.write_page,
        resumable=resumable,
        figures=lambda result: plots.figures(result.summary),
        sections=page.sections,
        preflight=preflight,
    )
)
