"""``sinklab tune``'s settings (and ``sinklab.tune_model``'s keyword arguments): :class:`TuneConfig`,
with the methods it takes from the tuning registry (:mod:`.methods`) and the tasks it reads by
default; the run itself is :mod:`.run`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Collection, Optional

from ..accuracy import (
    EVERY,
    ROTATIONS_HELP,
    SIZES,
    SUITE,
    check_rotations,
    check_seed,
    migrated_judge,
    sizes_for,
    split_rule_setting,
    task_names,
)
from ..core.configs import changed, setting
from ..core.errors import check, refuse_unread
from ..models.hf import MODEL_HELP, LoadOptions
from .formulas import SPARE_RULES
from .methods import TUNINGS, Tuning
from .methods.act import ACT_LAYER_RANGES
from .methods.zerotuning import ABLATION_GAMMA
from .profile import MODES, PROFILES

#: The methods ``--method`` takes: the registry's names, as it holds them when a parser or config reads them.
METHODS = TUNINGS.keys()
#: The tasks ``sinklab tune`` reads when none are named: the accuracy suite (BENCHMARKS.md 13).
DEFAULT_TASKS = SUITE

#: Each method's own settings (``act_...`` under ``--method act``), by name: the method that reads it.
METHOD_SETTINGS = {name: method.method for method in TUNINGS.values() for name in method.settings}

#: The settings a method may leave unread: its own (:data:`METHOD_SETTINGS`) and the batch size,
#: which a method that evaluates one example at a time does not read.
READ_BY_METHOD = (*METHOD_SETTINGS, "batch_size")


def check_method_read(given: Collection[str], method: str, batch_size: int) -> None:
    """Refuse, in one line, a setting of :data:`READ_BY_METHOD` given (``given``: their names) that
    ``method`` would not read: another method's, or a batch size other than 1 for a method that
    evaluates one example at a time."""
    refuse_unread(given, {name: (owner == method, f"--method {owner}") for name, owner in METHOD_SETTINGS.items()})
    check(
        "batch_size" not in given or method not in TUNINGS or not TUNINGS[method].whole_rows or batch_size == 1,
        f"--method {method} evaluates one example at a time: --batch-size {batch_size} would not be read; leave it out",
    )


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
    seed: int = setting(
        0, help="draws the splits and the shots (intervene --accuracy and compress --accuracy judge seed 0's test split)"
    )
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
        for flag, size in (("--validation", self.validation), ("--test", self.test)):
            check(size >= 2, f"{flag} must be at least 2 (a standard error and a paired test need two examples), got {size}")
        check_seed(self.seed)  # a negative seed was a numpy traceback after the whole run
        check(self.batch_size >= 1, f"--batch-size must be at least 1, got {self.batch_size}")
        check_rotations(self.rotations)
        check(self.method in METHODS, f"--method must be one of {', '.join(METHODS)}, got {self.method!r}")
        check(self.mode in MODES, f"--mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        check_method_read(changed(self, READ_BY_METHOD), self.method, self.batch_size)

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
