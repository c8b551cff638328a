"""``sinklab pretrain``'s settings: :class:`PretrainConfig` (model, data and optimisation of one
run, with defaults that depend on the corpus), the generator seeds of its draws, and the migrations
of configurations saved by older versions. The training loop is :mod:`.train`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Optional, Sequence

import torch

from ..core.attention import AttentionSpec, with_extras_off
from ..core.configs import changed, setting
from ..core.errors import check, refuse_unread
from ..core.orthoadam import OPTIMIZERS
from ..core.provenance import THREADS_HELP, check_threads, migrated_threads
from ..models.native import ModelConfig
from .bigram_backcopy import CORPUS_NAME as BB_CORPUS

#: Defaults that depend on the corpus. Text: about 12 minutes on 2 CPU cores (BENCHMARKS.md 4).
#: Bigram-Backcopy: calibrated so that the softmax baseline forms a clear sink (BENCHMARKS.md 4).
CORPUS_DEFAULTS = {
    "text": {"n_layers": 4, "seq_len": 256, "batch": 16, "steps": 300, "lr": 3e-3, "eval_every": 50, "checkpoint_every": 50},
    "bb": {"n_layers": 2, "seq_len": 128, "batch": 32, "steps": 1200, "lr": 1e-2, "eval_every": 200, "checkpoint_every": 200},
}


#: Generator seeds of the fixed evaluation draws (the calibration windows of static quantization
#: scales are drawn from the training split). A generated corpus (Bigram-Backcopy) draws its
#: training and validation sequences from one process, so training seeds live in their own space
#: (:func:`~.train.training_seed`, all >= TRAINING_SEEDS) that no evaluation seed can fall into. A CPU
#: generator keeps only the low 32 bits of its seed, so every seed stays below 2**32.
VALIDATION_SEED, SCAN_SEED, CALIBRATION_SEED = 1234, 4321, 2468
#: How the model knows positions: rotary embeddings, a learned vector per position, or nothing
#: but the causal mask (NoPE).
POSITIONS = ("rope", "learned", "none")
TRAINING_SEEDS, STEPS_PER_SEED, MAX_SEEDS = 1 << 31, 1 << 20, 1 << 11
#: TWEO's defaults (Liang et al. 2025): the loss weight a bare ``--tweo`` takes, the soft threshold
#: tau and the power p of its penalty mean((|A| / tau)^p) on every block's output A.
TWEO_WEIGHT, TWEO_TAU, TWEO_P = 0.01, 3.0, 4.0


#: The settings read only under another: TWEO's shape with ``--tweo``, the trigger count with ``--corpus bb``.
READ_ONLY_WITH = ("tweo_tau", "tweo_p", "bb_triggers")


def check_read(given: Sequence[str], tweo: float, corpus: str) -> None:
    """Refuse, in one line, a setting of :data:`READ_ONLY_WITH` given (``given``: their names) that
    this run would not read: TWEO's shape with its penalty off (``tweo`` 0), the trigger count on text."""
    bb = (corpus == BB_CORPUS, f"--corpus {BB_CORPUS}")
    refuse_unread(given, {"tweo_tau": (tweo > 0, "--tweo"), "tweo_p": (tweo > 0, "--tweo"), "bb_triggers": bb})


@dataclass
class PretrainConfig:
    """Model, data and optimisation of one pretraining run (defaults: about 12 min on 2 CPU cores)."""

    VERSION: ClassVar[int] = 5
    MIGRATIONS: ClassVar[dict] = {
        0: lambda saved: migrated_pretrain(saved),
        1: migrated_threads,
        2: lambda saved: migrated_training_mitigations(saved),
        3: lambda saved: migrated_unread_triggers(saved),
        4: with_extras_off,  # vga
    }

    corpus: str = "shakespeare"  # or "bb": the Bigram-Backcopy task
    tokenizer: str = "default"
    bos: bool = False  # one fixed first token in every window of a text corpus (Gu et al. 2025)
    bb_triggers: int = 3  # the k most frequent characters that trigger a back-copy (--corpus bb)
    attention: AttentionSpec = field(default_factory=AttentionSpec)
    sink_tokens: int = 0
    d_model: int = 128
    n_layers: Optional[int] = None  # None: CORPUS_DEFAULTS
    n_heads: int = 4
    tie_embeddings: bool = True
    positions: str = "rope"  # rope, learned (absolute, GPT-2) or none (NoPE)
    seq_len: Optional[int] = None  # None: CORPUS_DEFAULTS
    max_seq_len: Optional[int] = None  # the model's maximum positions (None: seq_len + sink tokens)
    batch: Optional[int] = None  # global batch, in sequences (None: CORPUS_DEFAULTS)
    steps: Optional[int] = None  # None: CORPUS_DEFAULTS
    lr: Optional[float] = None  # None: CORPUS_DEFAULTS
    min_lr_ratio: float = 0.1
    warmup: Optional[int] = None  # None: a tenth of the steps
    weight_decay: float = 0.1
    grad_clip: float = 1.0  # largest global gradient norm; 0: no clipping
    adam_beta2: float = 0.95
    optimizer: str = "adamw"  # or orthoadam
    tweo: float = 0.0  # TWEO's loss weight (0: off)
    tweo_tau: float = TWEO_TAU
    tweo_p: float = TWEO_P
    eval_every: Optional[int] = None  # None: CORPUS_DEFAULTS
    eval_batches: int = 8
    checkpoint_every: Optional[int] = setting(None, help="steps between checkpoints", result=False)  # None: CORPUS_DEFAULTS
    seed: int = 0
    scan_tokens: int = 64
    scan_batch: int = 8
    device: str = "auto"  # auto: the GPU when there is one, else the CPU
    threads: Optional[int] = setting(None, help=THREADS_HELP)  # torch's: it sets the float order, so part of the run

    def __post_init__(self) -> None:
        for name, value in CORPUS_DEFAULTS[self.corpus_kind].items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        for name in (
            "d_model",
            "n_layers",
            "n_heads",
            "seq_len",
            "batch",
            "steps",
            "eval_every",
            "eval_batches",
            "checkpoint_every",
        ):
            check(getattr(self, name) >= 1, f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        check(0 <= self.min_lr_ratio <= 1, f"--min-lr-ratio must lie in [0, 1], got {self.min_lr_ratio}")
        check(self.lr > 0, f"--lr must be positive, got {self.lr}")
        check(self.weight_decay >= 0, f"--weight-decay must be >= 0, got {self.weight_decay}")
        check(self.grad_clip >= 0, f"--grad-clip must be >= 0 (0: no clipping), got {self.grad_clip}")
        check(0 < self.adam_beta2 < 1, f"--adam-beta2 must lie in (0, 1), got {self.adam_beta2}")
        check(self.steps < STEPS_PER_SEED, f"--steps must be below {STEPS_PER_SEED}, got {self.steps}")
        check(0 <= self.seed < MAX_SEEDS, f"--seed must lie in [0, {MAX_SEEDS}), got {self.seed}")
        check_threads(self.threads)
        check(self.sink_tokens >= 0, f"--sink-tokens must be >= 0, got {self.sink_tokens}")
        check(self.d_model % self.n_heads == 0, f"--d-model {self.d_model} is not divisible by --n-heads {self.n_heads}")
        check(
            self.positions != "rope" or (self.d_model // self.n_heads) % 2 == 0,
            "the head dimension (d_model / n_heads) must be even for rotary embeddings",
        )
        if self.max_seq_len is None:
            self.max_seq_len = self.seq_len + self.sink_tokens
        check(
            self.seq_len + self.sink_tokens <= self.max_seq_len,
            f"--tokens {self.seq_len} plus {self.sink_tokens} sink tokens "
            f"exceeds the model's maximum of {self.max_seq_len} positions",
        )
        if self.warmup is None:
            self.warmup = self.steps // 10
        check(0 <= self.warmup < self.steps, f"--warmup must lie in [0, steps), got {self.warmup} for {self.steps} steps")
        check(self.positions in POSITIONS, f"--positions must be one of {', '.join(POSITIONS)}, got {self.positions!r}")
        check(self.optimizer in OPTIMIZERS, f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        check(
            all(math.isfinite(v) for v in (self.tweo, self.tweo_tau, self.tweo_p)),
            f"--tweo, --tweo-tau and --tweo-p must be finite, got {self.tweo}, {self.tweo_tau}, {self.tweo_p}",
        )
        check(self.tweo >= 0, f"--tweo is a loss weight (>= 0; 0: off), got {self.tweo}")
        check(self.tweo_tau > 0 and self.tweo_p > 0, f"--tweo-tau and --tweo-p must be > 0, got {self.tweo_tau}, {self.tweo_p}")
        check_read(changed(self, READ_ONLY_WITH), self.tweo, self.corpus)
        check(self.device in ("auto", "cpu", "cuda"), f"--device must be auto, cpu or cuda, got {self.device!r}")
        check(self.device != "cuda" or torch.cuda.is_available(), "--device cuda asked for, but PyTorch sees no GPU")

    @property
    def corpus_kind(self) -> str:
        return "bb" if self.corpus == BB_CORPUS else "text"

    def model_config(self, vocab_size: int) -> ModelConfig:
        return ModelConfig(
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            attention=self.attention,
            residual=True,
            mlp=True,
            norm=True,
            rope=self.positions == "rope",
            learned_positions=self.positions == "learned",
            scale_scores=True,
            vocab_size=vocab_size,
            tie_embeddings=self.tie_embeddings,
            sink_tokens=self.sink_tokens,
            max_seq_len=self.max_seq_len,
        )

    @property
    def variant(self) -> str:
        """The attention variant, sink tokens and training mitigations: ``softmax1+orthoadam``,
        ``softpick+tweo`` (TWEO's settings named where they are not the paper's: ``+tweo_w0.1``)."""
        name = self.attention.label + (f"+{self.sink_tokens}sink" if self.sink_tokens else "")
        if self.optimizer != "adamw":
            name += f"+{self.optimizer}"
        if self.tweo:
            differs = [
                (k, v)
                for k, v, d in (("w", self.tweo, TWEO_WEIGHT), ("tau", self.tweo_tau, TWEO_TAU), ("p", self.tweo_p, TWEO_P))
                if v != d
            ]
            name += "+tweo" + "".join(f"_{k}{v:.12g}" for k, v in differs)  # 12 digits: distinct settings, distinct names
        return name


#: What a run saved before a training key existed meant by it: rotary embeddings were the only
#: encoding before ``--positions``, and AdamW's beta2 was fixed at 0.95 before ``--adam-beta2``.
#: No other missing key is filled in (resume and :func:`.trained.load_trained` refuse it).
BEFORE_KEY_EXISTED = {"positions": "rope", "adam_beta2": 0.95}


def migrated_unread_triggers(saved: dict) -> dict:
    """Before version 4 a text run accepted ``--bb-triggers`` and ignored it: the value it recorded
    was never read, so it becomes the default that is now the only one a text run takes."""
    text = saved.get("corpus", "shakespeare") != BB_CORPUS
    return {**saved, **({"bb_triggers": PretrainConfig.bb_triggers} if text else {})}


def migrated_training_mitigations(saved: dict) -> dict:
    """Runs before version 3 had no value_gate, no OrthoAdam and no TWEO: they ran AdamW
    without the auxiliary loss."""
    return {
        **with_extras_off(saved),
        "optimizer": "adamw",
        "tweo": 0.0,
        "tweo_tau": TWEO_TAU,
        "tweo_p": TWEO_P,
    }


def migrated_pretrain(saved: dict) -> dict:
    """Runs before config version 1 lacked the keys of :data:`BEFORE_KEY_EXISTED`, recorded their
    run directory (``out``), and kept the model's architecture and the data's description in
    config.json (now in run.json's ``model`` entry, :func:`~.run.architecture_of` reads both)."""
    return {**BEFORE_KEY_EXISTED, **{k: v for k, v in saved.items() if k not in ("out", "model", "data")}}
