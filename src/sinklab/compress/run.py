"""``sinklab compress``: the keep-sink table. Every press at every ratio, with and without its
sinks kept, judged by compressed-context perplexity and passkey retrieval against the full cache.

One job per press (its whole row: every ratio x keep_sinks cell, every context and input; see
:mod:`.evaluate` for why a row costs about one prefill per input), plus one for the dense cache,
through the launchers. With a run directory each finished job's cells are kept in
``presses/<press>.json``, so a stopped run resumes with the jobs left.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Optional

from ..core.configs import setting
from ..core.errors import check
from ..core.launchers import LOCAL, launch
from ..core.results import Capability, RunContext, RunResult, register, stamped
from ..core.runs import write_json
from ..models.hf import LoadOptions, model_facts
from ..models.subjects import transformers_model
from ..press import DETECTED, PRESSES, press_named
from ..scan import BOS_CHOICES
from . import plots
from .evaluate import Cell, score_inputs
from .frame import COMPRESS_TABLES
from .tasks import CONTINUATION, DEPTHS, TASKS, passkey_prompts, text_window

JOBS_DIR = "presses"
DENSE = "dense"  # the uncompressed cache's job and row
RATIOS = (0.25, 0.5, 0.75, 0.875)


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

    VERSION: ClassVar[int] = 1

    model: Optional[str] = setting(None, help="a model folder, .gguf file or Hub id (None: the built-in SmolLM2)", cli=False)
    presses: tuple[str, ...] = setting(
        tuple(PRESSES), flag="--press", choices=tuple(PRESSES), metavar="P[,P...]", help=f"from {', '.join(PRESSES)}"
    )
    ratios: tuple[float, ...] = setting(RATIOS, flag="--ratio", metavar="R[,R...]", help="fractions of the context removed")
    keep_sinks: tuple = setting(
        (0, 1, 4, DETECTED),
        parse=keep_sinks_list,
        metavar="K[,K...]",
        help="sinks kept inside the budget: numbers of first tokens, and/or 'detected'",
    )
    tasks: tuple[str, ...] = setting(TASKS, flag="--task", choices=TASKS, metavar="T[,T...]", help="ppl and/or passkey")
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
    seed: int = setting(0, help="draws the passkeys (and the random press)")
    bos: str = setting("auto", choices=BOS_CHOICES, help="put the tokenizer's BOS first: yes, no, or auto (when it has one)")
    load: LoadOptions = field(default_factory=LoadOptions)

    def __post_init__(self) -> None:
        for ratio in self.ratios:
            check(0 < ratio < 1, f"--ratio takes fractions of the context removed, in (0, 1); got {ratio}")
        for keep in self.keep_sinks:
            check(keep == DETECTED or (isinstance(keep, int) and keep >= 0), f"--keep-sinks: bad value {keep!r}")
        for context in self.contexts:
            check(context >= 128, f"--context must be at least 128 tokens, got {context}")
        check(self.keys >= 1, f"--keys must be at least 1, got {self.keys}")
        unknown = [p for p in self.presses if p not in PRESSES]
        check(not unknown, f"unknown press {', '.join(unknown)}; choose from: {', '.join(PRESSES)}")

    def cells(self) -> list[Cell]:
        return [Cell(ratio, keep) for ratio in self.ratios for keep in self.keep_sinks]


@dataclass(frozen=True)
class PressJob:
    """One row of the table: a press (or the dense cache) over every input."""

    cfg: CompressConfig
    press: str


_LOADED: dict = {}  # the model a worker loaded, kept for its next job


def _model_for(cfg: CompressConfig, subject=None):
    if subject is not None:
        return transformers_model(subject)
    key = (cfg.model, repr(cfg.load))
    if key not in _LOADED:
        _LOADED.clear()
        _LOADED[key] = cfg.load.load(cfg.model)
    return _LOADED[key]


def run_job(job: PressJob, subject=None) -> dict:
    """A press's row: {input: {cell: scores}} over every context; the dense job scores ratio 0."""
    loaded = _model_for(job.cfg, subject)
    cfg, tokenizer = job.cfg, loaded.tokenizer
    name = "knorm" if job.press == DENSE else job.press  # the dense cache: any press at ratio 0
    press = press_named(name, **({"seed": cfg.seed} if name == "random" else {}))
    cells = [Cell(0.0, 0)] if job.press == DENSE else cfg.cells()
    rows: dict = defaultdict(dict)
    for context in cfg.contexts:
        texts = [cfg.corpus, *([cfg.outside] if cfg.outside else [])] if "ppl" in cfg.tasks else []
        windows = [text_window(tokenizer, text, context, cfg.bos) for text in texts]
        prompts = passkey_prompts(tokenizer, context, cfg.keys, cfg.seed, cfg.bos) if "passkey" in cfg.tasks else []
        for name, cell, scores in score_inputs(loaded.model, tokenizer, press, cells, windows, prompts):
            rows[f"{context}|{name}"][cell.key] = scores
    return {"facts": {"model": loaded.name, **model_facts(loaded.model)}, "rows": dict(rows)}


def measure(cfg: CompressConfig, context: RunContext = RunContext()) -> RunResult:
    """Every press's row (and the dense cache's), then the table."""
    jobs = [PressJob(cfg, name) for name in (DENSE, *cfg.presses)]
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
    return RunResult(stamped("compress", summarise(cfg, results)))


def _finished_jobs(workdir: Optional[Path]) -> dict:
    found = {}
    for path in sorted((workdir / JOBS_DIR).glob("*.json")) if workdir is not None else []:
        found[path.stem] = json.loads(path.read_text())
    return found


def _keep(workdir: Optional[Path], job: PressJob, result: dict) -> None:
    if workdir is not None:
        write_json(workdir / JOBS_DIR / f"{job.press}.json", result)


def summarise(cfg: CompressConfig, results: dict) -> dict:
    """The summary: the dense cache's figures, then one entry per (press, ratio, keep_sinks, context)."""
    dense_rows = results[DENSE]["rows"]
    dense = {str(c): task_figures(dense_rows, c, "0/0") for c in cfg.contexts}
    cells = []
    for name in cfg.presses:
        rows = results[name]["rows"]
        for cell in cfg.cells():
            for c in cfg.contexts:
                figures = task_figures(rows, c, cell.key)
                cells.append({"press": name, "ratio": cell.ratio, "keep_sinks": cell.keep_sinks, "context": c, **figures,
                              **relative(figures, dense[str(c)])})  # fmt: skip
    return {
        **results[DENSE]["facts"],
        "presses": list(cfg.presses),
        "ratios": list(cfg.ratios),
        "keep_sinks": list(cfg.keep_sinks),
        "contexts": list(cfg.contexts),
        "tasks": list(cfg.tasks),
        "continuation": CONTINUATION,
        "passkey": {"depths": list(DEPTHS), "keys_per_depth": cfg.keys, "seed": cfg.seed},
        "dense": dense,
        "cells": cells,
        "sink_effect": sink_effect(cells, cfg),
    }


def task_figures(rows: dict, context: int, cell: str) -> dict:
    """One cell's figures at one context: ppl per text, passkey accuracy (overall and per depth),
    the true key's log-probability (mean, spread) and rank, the kept fraction, the bytes kept and
    the sinks detected (per input)."""
    mine = {name.split("|", 1)[1]: by_cell[cell] for name, by_cell in rows.items() if name.startswith(f"{context}|")}
    texts = {name[4:]: s for name, s in mine.items() if name.startswith("ppl:")}
    keys = [(name.split(":")[1], s) for name, s in mine.items() if name.startswith("passkey:")]
    every = list(mine.values())
    out = {
        "kept_fraction": statistics.fmean(s["kept_fraction"] for s in every) if every else None,
        "bytes_ratio": statistics.fmean(s["bytes_ratio"] for s in every) if every else None,
        "sinks": sorted({tuple(s["sinks"]) for s in every}),
    }
    if texts:
        out["ppl"] = {text: math.exp(s["nll"]) for text, s in texts.items()}
    if keys:
        logprobs = [s["logprob"] for _, s in keys]
        by_depth = defaultdict(list)
        for depth, s in keys:
            by_depth[depth].append(s["correct"])
        out["passkey"] = {
            "accuracy": statistics.fmean(s["correct"] for _, s in keys),
            "accuracy_by_depth": {d: statistics.fmean(v) for d, v in by_depth.items()},
            "logprob_mean": statistics.fmean(logprobs),
            "logprob_std": statistics.pstdev(logprobs),
            "rank_median": statistics.median(s["rank"] for _, s in keys),
        }
    return out


def relative(figures: dict, dense: dict) -> dict:
    """Perplexity against the full cache's (1: no loss), per text."""
    if "ppl" not in figures:
        return {}
    return {"ppl_ratio": {text: value / dense["ppl"][text] for text, value in figures["ppl"].items()}}


def sink_effect(cells: list[dict], cfg: CompressConfig) -> list[dict]:
    """The paired statement: for each press, ratio, context and kept-sink setting other than 0,
    the change against keeping none (perplexity ratio per text; passkey accuracy and mean key
    log-probability differences)."""
    by = {(c["press"], c["ratio"], c["context"], c["keep_sinks"]): c for c in cells}
    effects = []
    for (press, ratio, context, keep), cell in by.items():
        base = by.get((press, ratio, context, 0))
        if keep == 0 or base is None:
            continue
        entry = {"press": press, "ratio": ratio, "context": context, "keep_sinks": keep}
        if "ppl" in cell:
            entry["ppl_change"] = {t: cell["ppl"][t] / base["ppl"][t] - 1 for t in cell["ppl"]}
        if "passkey" in cell:
            entry["accuracy_change"] = cell["passkey"]["accuracy"] - base["passkey"]["accuracy"]
            entry["logprob_change"] = cell["passkey"]["logprob_mean"] - base["passkey"]["logprob_mean"]
        effects.append(entry)
    return effects


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
    )
)
