"""The one run pipeline: every capability runs through :func:`run`, from the command line and from
a notebook alike, so both apply the same run-directory policy and get the same summary.

Without a run directory, :func:`run` checks what the run needs (the capability's ``preflight``),
measures and checks, and writes nothing. With one (``out``), the preflight refuses first what the
run could not do (inputs past the model's positions, results that do not line up, a run that would
drop what the directory measured), so a refused run leaves the directory as it was; then:

1. claim it (:func:`~.claim.claim_run_dir`: the ``--out`` policy): a finished run of the same
   configuration is read back and returned, another configuration is refused (a run of runs, a
   sweep, resumes over its runs instead), an unfinished one resumes where the capability keeps
   checkpoints, else starts over;
2. start it: ``run.json`` (command, versions, commit, launcher) and ``config.json``;
3. measure (in memory; a capability that trains keeps its checkpoints in the directory);
4. write: the model's facts into ``run.json``, the figures (PNGs of the report's own plotly
   figures), the capability's data files, ``summary.json``, and the report page last;
5. check: a failed numerical check marks the run failed in ``run.json`` (the same command runs
   it again) and raises :class:`~.errors.NumericalCheckFailed` with the results kept;
6. record the run finished, with the files it wrote.

An error (or Ctrl-C) in steps 2 to 6 is recorded in ``run.json`` (:func:`~.runs.fail_run`: status
``failed`` or ``interrupted``, the error's line) and raised again; the same command resumes the run
or starts it over, as any unfinished run.

Nothing else writes a run directory, and the summary is never changed after it is measured:
``result.summary`` is the same dict with or without ``out``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from .atomic import write_json
from .claim import RESUME, claim_run_dir
from .errors import NumericalCheckFailed, check
from .figures import Images, save_images, warm_up
from .provenance import torch_threads
from .results import Capability, RunContext, RunResult, load_result
from .runs import CONFIG, FINISHED, SUMMARY, config_record, fail_run, finish_run, record_model, start_run

#: The summary keys that say which model ran, where and how; run.json's ``model`` entry records them
#: too (the summary's ``model``, the model's name, as ``name``).
MODEL_FACTS = ("model", "device", "dtype", "device_map", "revision")


def run(
    capability: Capability,
    cfg: Any,
    subject: Any = None,
    out: Optional[str | os.PathLike] = None,
    overwrite: bool = False,
    resume: bool = False,
    launcher: Any = None,
    main_process: bool = True,
) -> RunResult:
    """Run ``capability`` with configuration ``cfg`` on ``subject`` (a model the caller holds, or
    None: the configuration's model is loaded), writing the run directory ``out`` when given.

    ``overwrite`` replaces a run there; ``resume`` insists on resuming (an error when ``out`` holds
    nothing to resume); ``launcher`` (the settings a capability's jobs run under) is recorded in
    run.json; ``main_process`` False (the other processes of a DDP run) measures but writes
    nothing. A finished run of the same configuration in ``out`` is returned as it is
    (``result.reused`` True) without measuring again. A configuration with a ``threads`` setting
    (the commands that train: ``--threads``) runs with torch on that many threads, which run.json
    records with the rest of the machine's facts."""
    with torch_threads(getattr(cfg, "threads", None)):
        return _run(capability, cfg, subject, out, overwrite, resume, launcher, main_process)


def _run(
    capability: Capability,
    cfg: Any,
    subject: Any,
    out: Optional[str | os.PathLike],
    overwrite: bool,
    resume: bool,
    launcher: Any,
    main_process: bool,
) -> RunResult:
    if out is None:
        check(
            not capability.needs_run_dir,
            f"a {capability.kind} run keeps checkpoints while it works: give it a run directory (out=)",
        )
        capability.preflight(cfg, RunContext(subject, None, launcher))
        result = capability.measure(cfg, RunContext(subject, None, launcher))
        capability.check(result)
        return _as_result(result, capability, None)
    out = Path(out)
    capability.preflight(cfg, RunContext(subject, out, launcher, overwrite=overwrite))
    if resume:
        check(
            capability.resumable is not None and capability.resumable(out), f"nothing to resume in {out}: it holds no checkpoint"
        )
    state = claim_run_dir(
        out,
        cfg,
        overwrite=overwrite,
        resumable=capability.resumable or (lambda run_dir: False),
        remove=main_process,
        holds_runs=capability.holds_runs,
        kind=capability.kind,
    )
    if state == FINISHED:
        found = load_result(out)
        found.reused = True
        return found
    if main_process:
        start_run(out, launcher, kind=capability.kind)
    try:
        return _measure_and_write(capability, cfg, subject, out, launcher, state, main_process)
    except BaseException as exc:  # a failed run says so in run.json (never "running"), then the error goes on
        if main_process:
            fail_run(out, exc)
        raise


def _measure_and_write(
    capability: Capability, cfg: Any, subject: Any, out: Path, launcher: Any, state: str, main_process: bool
) -> RunResult:
    """Steps 2 (config.json) to 6 of a started run."""
    if main_process and (state != RESUME or capability.holds_runs):  # a run of runs may resume under another configuration
        write_json(out / CONFIG, config_record(cfg))
    if main_process and capability.figures is not None:
        warm_up()  # the browser that draws the PNGs starts while the run measures
    context = RunContext(subject, out, launcher, resume=state == RESUME)
    result = _as_result(capability.measure(cfg, context), capability, out)
    if main_process:
        _write(capability, out, result)
    return result


def _as_result(result: RunResult, capability: Capability, out: Optional[Path]) -> RunResult:
    result.capability, result.out, result.reused = capability, out, False
    return result


def _write(capability: Capability, out: Path, result: RunResult) -> None:
    """Steps 4 to 6: the files (figures as PNGs of the page's own plotly figures), then the check,
    then the record (with why no figure could be drawn, where none could)."""
    summary = result.summary
    record_model(out, **{"name" if key == "model" else key: summary[key] for key in MODEL_FACTS if key in summary})
    images = save_images(capability.figures(result), out) if capability.figures is not None else Images()
    files = [*images.written, *capability.write(out, result)]
    write_json(out / SUMMARY, summary)
    files += [SUMMARY, capability.write_page(out).name]
    notes = {"figures_skipped": images.skipped} if images.skipped else {}
    try:
        capability.check(result)
    except NumericalCheckFailed as exc:
        finish_run(out, files, failed_check=str(exc), **notes)
        raise NumericalCheckFailed(f"{exc}; results kept in {out / SUMMARY}", out) from None
    finish_run(out, files, **notes)
