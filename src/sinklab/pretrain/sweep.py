"""``sinklab sweep``: every attention variant pretrained under one budget, several seeds, compared.

Every normalisation, each per-head extra alone, and the training mitigations alone and in the
combinations issue 52 names (:data:`TRAINING_MITIGATIONS`); Bigram-Backcopy (``--corpus bb``)
adds softmax with one learned sink token. Text (default): 2 seeds, the default text budget, one run
after another (each uses every core). Bigram-Backcopy: 3 seeds, the calibrated BB budget, two
single-threaded runs at a time.

Each run is one job of the launcher, a ``sinklab pretrain`` run (the one pipeline) in its own
directory ``OUT/<variant>-seed<seed>``: a finished run is kept (and not launched), a half-finished
one resumed, one of another configuration refused (or, with ``rerun_stale``, trained again),
whichever launcher ran it. Each run guards its own configuration, so ``OUT`` itself takes another
sweep's (more seeds, other variants, another budget): the runs it already holds are kept. The
sweep ends with the comparison of ``sinklab compare``: each variant against softmax seed by seed
(mean difference, t, exact sign-flip p-value).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import ClassVar, Optional

from ..core import pipeline
from ..core.attention import ATTN_NORMS, AttentionSpec
from ..core.claim import failed_before_writing, run_differs
from ..core.configs import setting
from ..core.errors import check
from ..core.flags import seed_ranges
from ..core.launchers import LOCAL, LauncherSettings, launch
from ..core.provenance import THREADS_HELP, check_threads, migrated_threads
from ..core.results import Capability, RunContext, RunResult, register, stamped
from ..core.runs import is_finished
from . import page
from .compare import COMPARE_RUNS, CompareRunsConfig
from .config import TWEO_WEIGHT, PretrainConfig
from .run import PRETRAIN, check_data

#: The training mitigations of issue 52 alone (OrthoAdam, TWEO) and the combinations it names:
#: softmax-1 with OrthoAdam (as Kaul et al. 2025 train it), the output gate with head-wise RMSNorm,
#: and softpick with TWEO. Softpick alone is a normalisation; the value gates (vga, value_gate) are extras.
TRAINING_MITIGATIONS = (
    {"optimizer": "orthoadam"},
    {"tweo": TWEO_WEIGHT},
    {"attention": AttentionSpec("softmax1"), "optimizer": "orthoadam"},
    {"attention": AttentionSpec(gate=True, head_norm=True)},
    {"attention": AttentionSpec("softpick"), "tweo": TWEO_WEIGHT},
)
#: corpus -> (default seeds, worker processes, the variants beyond every normalisation, extra and training mitigation)
PLANS = {
    "shakespeare": ((0, 1), 1, ()),
    "bb": ((0, 1, 2), 2, ({"sink_tokens": 1},)),
}
#: What ``settings`` may change: a setting of every run, less what the sweep itself varies (corpus,
#: attention, sink tokens, training mitigations and TWEO's shape, seed, steps) or derives
#: (max_seq_len follows each run's length and sink tokens; device: each run's own, auto).
FIXED_BY_THE_SWEEP = (
    "corpus",
    "attention",
    "sink_tokens",
    "optimizer",
    "tweo",
    "tweo_tau",
    "tweo_p",
    "seed",
    "steps",
    "max_seq_len",
    "device",
    "threads",
)
SETTABLE = tuple(f.name for f in fields(PretrainConfig) if f.name not in FIXED_BY_THE_SWEEP)


@dataclass
class SweepConfig:
    """Which runs a sweep trains (corpus, seeds, variants, budget, settings of every run) and how
    many at a time (``workers``: it does not change what a run computes)."""

    VERSION: ClassVar[int] = 2
    MIGRATIONS: ClassVar[dict] = {1: migrated_threads}

    corpus: str = setting(
        "shakespeare", choices=tuple(PLANS), help="shakespeare (every normalisation and extra) or bb (the mitigation sweep)"
    )
    seeds: tuple[int, ...] = setting(
        (),
        metavar="SEEDS",
        shown="0,1 for text, 0,1,2 for bb",
        parse=seed_ranges,
        help="seeds of every variant, e.g. 0-7 or 0,2,5",
    )
    variants: tuple[str, ...] = setting(
        (), metavar="V[,V...]", shown="all", help="the variants to train, e.g. softmax,softmax+gate"
    )
    steps: Optional[int] = setting(None, help="the training budget of every run", shown="the corpus default")
    settings: dict = setting(
        help="a training setting of every run, KEY=VALUE (repeatable), e.g. lr=3e-3 positions=learned",
        cli=False,
        default_factory=dict,
    )
    workers: Optional[int] = setting(
        None, shown="1 for text, 2 single-threaded for bb", help="runs trained at a time here", result=False
    )
    rerun_stale: bool = setting(False, help="train again a run of another configuration (default: refuse it)", result=False)
    threads: Optional[int] = setting(None, help=THREADS_HELP, metavar="N")

    def __post_init__(self) -> None:
        unknown = sorted(set(self.settings) - set(SETTABLE))
        check(
            not unknown,
            f"--set {', '.join(unknown)}: the sweep sets that itself or it is not a training setting; "
            f"settable: {', '.join(SETTABLE)}",
        )
        self.seeds = tuple(self.seeds) or PLANS[self.corpus][0]
        check_threads(self.threads)
        self.runs()  # an unknown variant or a bad setting is refused here, before the sweep claims its --out

    def runs(self) -> list[PretrainConfig]:
        """The sweep's runs, seed-major; ``variants`` keeps only those names."""
        base = PretrainConfig(corpus=self.corpus, steps=self.steps, threads=self.threads, **self.settings)
        attention = [{"attention": AttentionSpec(name)} for name in ATTN_NORMS] + [
            {"attention": s} for s in AttentionSpec().with_each_extra()
        ]
        variants = [*attention, *TRAINING_MITIGATIONS, *PLANS[self.corpus][2]]
        configs = [replace(base, **v, seed=s, max_seq_len=None) for s in self.seeds for v in variants]
        known = list(dict.fromkeys(c.variant for c in configs))
        unknown = [v for v in self.variants if v not in known]
        check(not unknown, f"--variants: unknown {', '.join(unknown)}; the sweep has {', '.join(known)}")
        return [c for c in configs if not self.variants or c.variant in self.variants]


def parse_setting(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` as a setting of every run: the value read as JSON (numbers, true, false), else
    text (``positions=learned``), and of the field's type (a JSON true is not an int)."""
    key, sep, value = text.partition("=")
    check(key != "threads", f"--set {text}: the threads are the sweep's own flag: give --threads {value or 'N'}")
    check(bool(sep) and key in SETTABLE, f"--set {text}: expected KEY=VALUE with KEY one of {', '.join(SETTABLE)}")
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = value
    expected = type(getattr(PretrainConfig(corpus="bb"), key))
    check(
        type(parsed) is expected or (expected is float and type(parsed) is int),
        f"--set {text}: {key} takes {expected.__name__} values",
    )
    return key, parsed


@dataclass(frozen=True)
class SweepJob:
    cfg: PretrainConfig
    out: str
    rerun_stale: bool


def train_one(job: SweepJob) -> dict:
    """One run of the sweep through the pipeline: its summary (a finished run read back, a
    half-finished one resumed); a run of another configuration is refused, naming the sweep's own
    way out (the launcher's message names the job), or trained again (as one that failed before
    writing anything is, the ``--out`` policy's exception)."""
    differs = run_differs(job.out, job.cfg)
    check(
        differs is None or job.rerun_stale or failed_before_writing(job.out),
        f"{job.out} holds a run of another configuration ({differs}); pass --rerun-stale to train it again",
    )
    return pipeline.run(PRETRAIN, job.cfg, out=job.out, overwrite=differs is not None).summary


def run_dir(root: Path, cfg: PretrainConfig) -> Path:
    return root / f"{cfg.variant}-seed{cfg.seed}"


def measure(cfg: SweepConfig, context: RunContext) -> RunResult:
    """Train every run (one job each on ``context.launcher``), then compare them."""
    root = context.workdir
    jobs = [SweepJob(run, str(run_dir(root, run)), cfg.rerun_stale) for run in cfg.runs()]
    workers = cfg.workers or PLANS[cfg.corpus][1]
    launch(
        train_one,
        [job for job in jobs if not (is_finished(job.out) and run_differs(job.out, job.cfg) is None)],
        (context.launcher or LOCAL).with_threads(cfg.threads),
        root,
        workers,
        desc=f"sweep {cfg.corpus}",
        label=lambda job: Path(job.out).name,
    )
    compared = COMPARE_RUNS.measure(CompareRunsConfig(tuple(job.out for job in jobs)))
    return RunResult(
        stamped(
            KIND,
            {
                **{k: v for k, v in compared.summary.items() if k not in ("kind", "schema_version")},
                "corpus": cfg.corpus,
                "steps": jobs[0].cfg.steps,
                "settings": cfg.settings,
            },
        ),
        compared.data,
    )


KIND = "pretrain-sweep"

SWEEP = register(
    Capability(
        KIND,
        SweepConfig,
        measure,
        lambda out, result: [],
        tables=COMPARE_RUNS.tables,
        write_page=page.write,
        resumable=lambda run_dir: True,
        holds_runs=True,
        needs_run_dir=True,
        figures=COMPARE_RUNS.figures,
        preflight=lambda cfg, context: check_data(cfg.runs()[0]),  # every run shares the data settings
    )
)


def run_sweep(
    cfg: SweepConfig, out: str | os.PathLike, launcher: Optional[LauncherSettings] = None, overwrite: bool = False
) -> RunResult:
    """``sinklab sweep`` in Python: train the sweep's runs into ``out`` (resuming it) and compare them."""
    return pipeline.run(SWEEP, cfg, out=out, launcher=launcher, overwrite=overwrite)


DEFAULT_OUTS = {"shakespeare": "runs/sweep", "bb": "runs/sweep-bb"}
