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
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional

from ..accuracy import (
    EVERY,
    ROTATIONS_HELP,
    SIZES,
    SUITE,
    Judged,
    LmEvalFiles,
    check_prompts_fit,
    check_rotations,
    check_seed,
    check_tasks,
    evaluate,
    lm_eval_version,
    lm_for,
    migrated_judge,
    questions,
    read_task,
    sizes_for,
    split_rule_setting,
    task_names,
    verdict,
)
from ..core.configs import setting
from ..core.errors import check
from ..core.progress import progress_bar
from ..core.results import Capability, RunContext, RunResult, register, stamped
from ..core.schemas import REGISTERED_ENUMS
from ..models.hf import MODEL_HELP, LoadOptions, model_facts, read_header
from ..models.subjects import transformers_model
from . import page, plots
from .formulas import SPARE_RULES
from .frame import TUNE_TABLES
from .methods import TUNINGS, Tuning
from .methods.act import ACT_LAYER_RANGES
from .methods.zerotuning import ABLATION_GAMMA
from .profile import MODES, PROFILES, ablation_profile, head_profile
from .search import Candidate, best
from .tunings import _tuned, save_tuning, to_record

#: The methods ``--method`` takes: the registry's names, as it holds them when a parser or config reads them.
METHODS = TUNINGS.keys()
#: The tasks ``sinklab tune`` reads when none are named: the accuracy suite (BENCHMARKS.md 13).
DEFAULT_TASKS = SUITE


#: The summary's schema: 3, accuracy asked under every order of the listed choices (``rotations``),
#: rotation-averaged and strict accuracy, the gold log-probability among the choices, the sign-flip p.
SCHEMA_VERSION = 3


@dataclass
class TuneConfig:
    """``sinklab tune``'s settings (and ``sinklab.tune_model``'s keyword arguments)."""

    VERSION: ClassVar[int] = 2
    MIGRATIONS: ClassVar[dict] = {
        1: lambda saved: {
            **migrated_judge(saved, "tasks", "rotations"),
            "profile": "gradient",
            "act_layers": "official",
            "act_spare": "first_token",
            **TUNINGS[saved.get("method", "zerotuning")].v1_settings,  # ACT ran on every layer
        }
    }

    model: Optional[str] = setting(None, help=MODEL_HELP, cli=False)
    method: str = setting("zerotuning", choices=METHODS, help="; ".join(m.help for m in TUNINGS.values()))
    mode: str = setting(
        "supervised", choices=MODES, help="supervised: validation labels pick the tuning; unsupervised: lowest output entropy"
    )
    tasks: tuple[str, ...] = setting(
        DEFAULT_TASKS,
        metavar="T[,T...]",
        parse=task_names,
        help="BIG-bench task names or task.json paths (one tuning each; suite: the suite's)",
    )
    shots: int = setting(
        0,
        help="shots per prompt, drawn from the task's own examples (BIG-bench's few-shot convention)",
        aliases=("--num-fewshot", "--num_fewshot"),
        alias_note="lm-eval's spelling, accepted as an alias",
    )
    validation: int = setting(SIZES["validation"], help="validation examples per task (the profile and the search read them)")
    test: int = setting(SIZES["test"], help="test examples per task (the verdict)")
    seed: int = setting(0, help="draws the splits and the shots")
    rotations: int = setting(EVERY, help=ROTATIONS_HELP)
    profile: str = setting(
        "gradient",
        choices=PROFILES,
        help="how heads are ranked: gradient (every head's derivative at once, one backward pass per validation example) "
        f"or ablation (the papers': each head edited alone, gamma {ABLATION_GAMMA:g} or ACT's beta, one validation pass "
        "per head: hours on a CPU for a 30-layer model)",
    )
    act_layers: str = setting(
        "official",
        choices=tuple(ACT_LAYER_RANGES),
        help="--method act: the layers it may calibrate: official (the paper's code: all but the first two and the last) or all",
    )
    act_spare: str = setting(
        "first_token",
        choices=SPARE_RULES,
        help="--method act: the sink kept: first_token (position 0, always) or first_sink (the first found, as the paper's code)",
    )
    splits: int = split_rule_setting()
    batch_size: int = setting(8, help="lm-eval's batch size (ACT's evaluations run one example at a time)", result=False)
    load: LoadOptions = field(default_factory=LoadOptions)

    def __post_init__(self) -> None:
        self.tasks = task_names(self.tasks)  # tune_model(tasks="navigate") or ("suite",) as the flag reads them
        check(bool(self.tasks), "--tasks needs at least one task")
        check(self.shots >= 0, f"--shots must be at least 0, got {self.shots}")
        check(self.validation >= 1, f"--validation must be at least 1, got {self.validation}")
        check(self.test >= 1, f"--test must be at least 1, got {self.test}")
        check_seed(self.seed)  # a negative seed was a numpy traceback after the whole run
        check(self.batch_size >= 1, f"--batch-size must be at least 1, got {self.batch_size}")
        check_rotations(self.rotations)
        check(self.method in METHODS, f"--method must be one of {', '.join(METHODS)}, got {self.method!r}")
        check(self.mode in MODES, f"--mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        owners = {name: method.method for method in TUNINGS.values() for name in method.settings}
        unread = [
            name for name, owner in owners.items() if owner != self.method and getattr(self, name) != getattr(TuneConfig, name)
        ]
        flags = " and ".join("--" + name.replace("_", "-") for name in unread)
        check(
            not unread,
            f"{flags} {'is' if len(unread) == 1 else 'are'} read only with --method {owners[unread[0]] if unread else ''}",
        )

    @property
    def tuning(self) -> type[Tuning]:
        """The method's class (:mod:`.methods`)."""
        return TUNINGS[self.method]

    def method_options(self) -> dict:
        """What the method's profile and candidates are drawn with (:meth:`~.methods.Tuning.options`)."""
        return self.tuning.options(self)

    @property
    def sizes(self) -> dict:
        return sizes_for(self.shots, self.validation, self.test)


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
