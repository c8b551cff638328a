"""``sinklab tune`` and ``sinklab.tune_model``: the sink as a lever for accuracy (the ``TUNE``
capability of the one pipeline).

Per task: the validation split's requests profile every head (:mod:`.profile`), candidate tunings
are judged on validation by lm-eval (:mod:`.search`), and the chosen tuning and the untouched model
are judged on the test split by lm-eval, example by example (:mod:`sinklab.accuracy.paired`).

A run directory holds, beside the summary, each task's tuning (``tuning-<task>.json``), the
profiles, and the test verdict in lm-eval's own files (:mod:`sinklab.accuracy.lm_eval_files`):
``lm_eval_results.json``, whose entries are ``<task>|untouched`` and ``<task>|tuned`` (the tuned
entry is the untouched model's where no tuning beat it on validation: the verdict is no change),
and their per-example samples, ``samples_<task>_untouched.jsonl`` and ``samples_<task>_tuned.jsonl``.
The settings are :class:`~.config.TuneConfig`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..accuracy import (
    Judged,
    LmEvalFiles,
    check_prompts_fit,
    check_tasks,
    evaluate,
    lm_eval_version,
    lm_for,
    questions,
    read_task,
    verdict,
)
from ..core.errors import check
from ..core.progress import progress_bar
from ..core.results import Capability, RunContext, RunResult, register, stamped
from ..core.schemas import REGISTERED_ENUMS
from ..models.hf import model_facts, read_header
from ..models.subjects import transformers_model
from . import page, plots
from .config import TuneConfig
from .frame import TUNE_TABLES
from .methods import TUNINGS
from .profile import ablation_profile, head_profile
from .search import Candidate, best
from .tunings import _tuned, save_tuning, to_record

#: The summary's schema: 3, accuracy asked under every order of the listed choices (``rotations``),
#: rotation-averaged and strict accuracy, the gold log-probability among the choices, the sign-flip p.
SCHEMA_VERSION = 3


def preflight(cfg: TuneConfig, context: RunContext) -> None:
    """Before the run directory is claimed: every task readable, large enough and named once, its
    prompts within the model's positions, and a BOS token (the configuration's model read without its weights)."""
    loaded = transformers_model(context.subject) if context.subject is not None else read_header(cfg.model, cfg.load)
    tasks = check_tasks(cfg.tasks, loaded.tokenizer, cfg.sizes, cfg.seed)
    config: Any = loaded.config  # a transformers PretrainedConfig
    layers = config.get_text_config().num_hidden_layers
    cfg.tuning.check_model(layers, cfg.method_options())
    splits = ("validation", "test")
    check_prompts_fit(tasks, loaded.tokenizer, cfg.shots, cfg.sizes, loaded.max_positions, splits, cfg.seed, "--shots")


def profile_heads(model, asked, cfg: TuneConfig, shape: tuple[int, int]) -> tuple:
    """(L, H): the validation objective's response to each head's edit, as ``cfg.profile`` measures
    it (ACT's ablation tries only the layers it may calibrate: NaN elsewhere), and the passes it cost."""
    options = cfg.method_options()
    if cfg.profile == "gradient":
        profile = head_profile(model, asked, cfg.method, cfg.mode, shape, **options)
        return profile, {"profile_forward_backward_passes": len(asked), "profile_forward_passes": 0}
    heads = [(layer, head) for layer in cfg.tuning.editable_layers(shape[0], options) for head in range(shape[1])]
    profile = ablation_profile(model, asked, cfg.method, cfg.mode, shape, cfg.tuning.ablation_strength, heads, **options)
    return profile, {"profile_forward_backward_passes": 0, "profile_forward_passes": (len(heads) + 1) * len(asked)}


def tune_task(model, lm, task, cfg: TuneConfig) -> tuple[dict, dict]:
    """One task's profile, search and verdict: (its summary entry, its data: the profile, the
    chosen tuning and the verdict's two scored runs, ``judged``, lm-eval's output on them kept)."""
    shape = (model.config.num_hidden_layers, model.config.num_attention_heads)
    clock = time.perf_counter()
    asked = questions(lm, task, "validation", cfg.shots, cfg.sizes, cfg.seed, cfg.rotations)
    profile, passes = profile_heads(model, asked, cfg, shape)
    profile_s = time.perf_counter() - clock

    clock = time.perf_counter()

    def scored(split: str):
        return evaluate(lm, [task], split, cfg.shots, cfg.sizes, cfg.seed, cfg.rotations)[0]

    untouched = Candidate("untouched", cfg.tuning.untouched(*shape), scored("validation"))
    tried = [untouched]
    for label, tuning in progress_bar(
        cfg.tuning.candidates(profile, cfg.method_options()), desc=f"searching ({task.name})", unit="tuning", leave=False
    ):
        with _tuned(model, tuning):
            tried.append(Candidate(label, tuning, scored("validation")))
    chosen = best(tried, cfg.mode)
    search_s = time.perf_counter() - clock

    before = scored("test")
    if chosen is untouched:  # nothing beat the model on validation: the verdict is no change
        after = before
    else:
        with _tuned(model, chosen.tuning):
            after = scored("test")
    entry = {
        "task": task.name,
        "chance": task.chance,
        "chosen": chosen.label,
        "heads_tuned": chosen.tuning.scaled,
        "validation": [{"label": c.label, "heads_tuned": c.tuning.scaled, **c.scored.row()} for c in tried],
        "test": {"untouched": before.row(), "tuned": after.row()},
        "paired": verdict(before, after, cfg.seed),
        "cost": {
            "profile_examples": len(asked),  # requests: examples times the orders of their choices
            **passes,
            "profile_s": round(profile_s, 2),
            "search_evaluations": len(tried),
            "search_examples_scored": sum(c.scored.n for c in tried),
            "search_s": round(search_s, 2),
        },
    }
    judged = (Judged(task.name, "untouched", before), Judged(task.name, "tuned", after, {"tuning": chosen.label}))
    return entry, {"profile": profile.cpu(), "tuning": chosen.tuning, "judged": judged}


def measure(cfg: TuneConfig, context: RunContext = RunContext()) -> RunResult:
    """Every task's tuning and verdict, in memory: the summary, and as data each task's head
    profile (L, H), chosen tuning (the object ``sinklab.applied`` takes) and the test
    verdict's scored runs as lm-eval's files hold them (``lm_eval``: :class:`~sinklab.accuracy.LmEvalFiles`)."""
    loaded = transformers_model(context.subject) if context.subject is not None else cfg.load.load(cfg.model)
    model, tokenizer = loaded.model, loaded.tokenizer
    config: Any = model.config
    lm = lm_for(model, tokenizer, 1 if cfg.tuning.whole_rows else cfg.batch_size)  # whole columns: no padded rows
    entries, judged = [], []
    data: dict[str, Any] = {"profiles": {}, "tunings": {}}
    for name in progress_bar(cfg.tasks, desc=f"tuning ({cfg.method}, {cfg.mode})", unit="task"):
        entry, found = tune_task(model, lm, read_task(name), cfg)
        entries.append(entry)
        data["profiles"][entry["task"]] = found["profile"]
        data["tunings"][entry["task"]] = found["tuning"]
        judged += found["judged"]
    data["lm_eval"] = LmEvalFiles(tuple(judged), loaded.name, cfg.seed, cfg.rotations, cfg.splits)
    summary = {
        "model": loaded.name,
        **model_facts(model),
        "layers": config.num_hidden_layers,
        "heads": config.num_attention_heads,
        "method": cfg.method,
        "mode": cfg.mode,
        "shots": cfg.shots,
        "rotations": cfg.rotations,
        "profile": cfg.profile,
        "sizes": {"validation": cfg.validation, "test": cfg.test},
        "engine": f"lm-eval {lm_eval_version()}",
        "tasks": entries,
        "tunings": {task: to_record(t) for task, t in data["tunings"].items()},
    }
    return RunResult(stamped("tune", summary, SCHEMA_VERSION), data)


def write(out: Path, result: RunResult) -> list[str]:
    """Each task's tuning as ``tuning-<task>.json`` (``sinklab.tune.load_tuning`` reads it back),
    the profiles, and the test verdict as lm-eval's files (``lm_eval_results.json``, ``samples_*.jsonl``)."""
    names = []
    for task, tuning in result.data["tunings"].items():
        name = f"tuning-{task.replace('/', '__')}.json"
        save_tuning(tuning, out / name)
        names.append(name)
    plots.save_data(out, result.data)
    check("lm_eval" in result.data, "this tune result holds no lm-eval output to write (measure it with sinklab.tune_model)")
    return [*names, plots.PROFILES_FILE, *result.data["lm_eval"].write(out)]


def read_data(run_dir: Path) -> dict:
    return plots.read_data(run_dir)


#: The summary's method lists are the registry's (a method added in one file validates).
REGISTERED_ENUMS["tune"] = {
    "/properties/method": lambda: list(TUNINGS),
    "/properties/tunings/additionalProperties/properties/method": lambda: list(TUNINGS),
}
TUNE = register(
    Capability(
        "tune",
        TuneConfig,
        measure,
        write,
        tables=TUNE_TABLES,
        write_page=page.write,
        read_data=read_data,
        figures=lambda result: plots.figures(result.summary, result.data),
        sections=plots.sections,
        preflight=preflight,
    )
)
