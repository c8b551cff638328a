"""``sinklab adapt --to NAME``: fine-tune a mitigation into a pretrained model by distillation.

The student is the model with the mitigation (:mod:`.mitigations`), reading text without BOS;
the teacher is the frozen original reading the same text after BOS. Loss: KL(teacher || student)
on every next-token distribution plus ``lm_weight`` times the LM loss. During the first ``ramp``
fraction of the steps BOS fades out and the mitigation fades in, so step 0 is exactly the
original model (``exact_check``) and the rest of training has no sink token at all: the model
must find its "do nothing" in the mitigation. Only the mitigation's parameters train unless
``full``. Checkpoints every ``checkpoint_every`` steps; ``resume`` continues from the last one.
A step-0 logit difference beyond :func:`~.prefix.exact_tolerance` fails the run after its results
are written (:func:`~.run.check_exact`). What the run writes, and the adapted model read back from
it (:func:`~.finetuned.load_adapted`), are in :mod:`.finetuned`.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..core.atomic import append_jsonl
from ..core.checkpoint import checkpoint_state, drop_rows_after, latest_checkpoint, load_checkpoint, save_checkpoint
from ..core.configs import setting
from ..core.errors import check
from ..core.orthoadam import OPTIMIZERS, build_optimizer
from ..core.progress import progress_bar
from ..core.provenance import THREADS_HELP, check_threads, migrated_threads
from ..core.results import Capability, RunContext, RunResult, register, stamped
from ..models.hf import MODEL_HELP, LoadedModel, LoadOptions, describe_architecture, model_facts
from ..models.subjects import transformers_model
from . import page, plots
from .adapted import AdaptedModel
from .evaluate import Condition, Evaluation, corpus_tokens, corpus_windows, prepend
from .finetuned import figures, has_checkpoint, read_data, write
from .frame import ADAPT_TABLES
from .mitigations import MITIGATIONS, make_mitigation
from .prefix import SinkPrefix, bos_token, exact_tolerance
from .probe import head_rms, profile_adapted, profile_original
from .run import EXACT_WINDOWS, FULL_PRECISION, PREFIX, check_exact, measure_ppl, nested_evaluation


@dataclass
class FinetuneConfig:
    """``sinklab adapt --to NAME``'s settings."""

    VERSION: ClassVar[int] = 3
    #: version 2 -> 3: runs before --optimizer trained with AdamW
    MIGRATIONS: ClassVar[dict] = {0: nested_evaluation, 1: migrated_threads, 2: lambda saved: {**saved, "optimizer": "adamw"}}

    model: Optional[str] = setting(None, help=MODEL_HELP, cli=False)
    mitigation: str = setting("gate", help="the mitigation fine-tuned in", flag="--to", choices=tuple(MITIGATIONS), cli=False)
    steps: int = setting(300, help="optimizer steps")
    full: bool = setting(False, help="train every weight of the model, not only the mitigation's parameters")
    evaluation: Evaluation = field(default_factory=Evaluation)
    outside: Optional[str] = setting(
        "pydoc",
        flag="--outside-corpus",
        metavar="CORPUS",
        parse=lambda text: None if text == "none" else text,
        help="also measure perplexity on this corpus of another domain, where fitting the training text cannot help "
        "(pydoc: Python's language reference; 'none' skips it)",
    )
    seq_len: int = setting(128, help="tokens per training sequence", flag="--train-tokens", aliases=("--seq-len",))
    batch: int = setting(4, help="sequences per step")
    lr: Optional[float] = setting(None, help="learning rate", shown="1e-2 for the mitigation's parameters, 1e-5 with --full")
    optimizer: str = setting(
        "adamw",
        choices=OPTIMIZERS,
        help="adamw, or orthoadam: Adam's moments in a fixed random rotation per parameter, drawn from --seed (Kaul et al. 2025)",
    )
    lm_weight: float = setting(1.0, help="weight of the LM loss next to the distillation KL")
    ramp: float = setting(0.5, help="fraction of the steps over which BOS fades out and the mitigation in")
    checkpoint_every: int = setting(50, help="steps between checkpoints", result=False)
    seed: int = setting(0, help="seed of the training batches")
    threads: Optional[int] = setting(None, help=THREADS_HELP, metavar="N")
    load: LoadOptions = field(default_factory=LoadOptions)

    def __post_init__(self) -> None:
        check(self.mitigation in MITIGATIONS, f"unknown mitigation {self.mitigation!r}; choose one of: {', '.join(MITIGATIONS)}")
        check(self.steps >= 1, f"--steps must be at least 1, got {self.steps}")
        check(self.seq_len >= 2 and self.batch >= 1, "--train-tokens must be at least 2 and --batch at least 1")
        check(0 < self.ramp <= 1, f"--ramp must lie in (0, 1], got {self.ramp}")
        check(self.lr is None or self.lr > 0, f"--lr must be positive, got {self.lr}")
        check(self.checkpoint_every >= 1, "--checkpoint-every must be at least 1")
        check_threads(self.threads)

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else (1e-5 if self.full else 1e-2)


def ramp_at(step: int, cfg: FinetuneConfig) -> float:
    """The ramp during training step ``step`` (0-indexed): it rises linearly and reaches 1 at step
    ``ramp * steps`` (ramp 0, the original model, is where training starts from)."""
    return min(1.0, (step + 1) / max(1.0, cfg.ramp * cfg.steps))


def measure(cfg: FinetuneConfig, context: RunContext) -> RunResult:
    """Train (resuming from the run directory's last checkpoint when it holds one), then measure
    before / after, in memory: the summary and, as data, the trained mitigation's tensors
    (``adapter``) and BOS's cached prefix. ``context.subject``: a loaded model or Subject, trained
    where it is (None: load ``cfg.model`` with ``cfg.load``)."""
    out = context.workdir
    loaded = transformers_model(context.subject) if context.subject is not None else cfg.load.load(cfg.model)
    model = loaded.model
    bos = bos_token(loaded.tokenizer, model)
    check(bos is not None, f"--to needs a model with a fixed BOS token to start from; {loaded.name} has none")
    bos_prefix = SinkPrefix.compute(model, [bos])
    mitigation = make_mitigation(cfg.mitigation, model, bos_prefix)
    model.requires_grad_(cfg.full)
    teacher = copy.deepcopy(model).requires_grad_(False) if cfg.full else model
    train_ids = corpus_tokens(cfg.evaluation.corpus, loaded.tokenizer, held_out=False, limit=200 * cfg.seq_len * cfg.batch)
    mitigation.calibrate(head_rms(teacher, bos, _batch(train_ids, cfg, -1)))
    adapted = AdaptedModel(model, mitigation, bos_prefix)
    params = [p for p in mitigation.parameters() if p.requires_grad] + (list(model.parameters()) if cfg.full else [])
    check(params, f"{cfg.mitigation} adds no parameters to train; pass --full to fine-tune the model's weights with it")
    opt = build_optimizer(cfg.optimizer, params, seed=cfg.seed, lr=cfg.learning_rate, weight_decay=0.0)
    trained = nn.ModuleDict({"mitigation": mitigation, **({"model": model} if cfg.full else {})})
    ev = cfg.evaluation
    evaluation = corpus_windows(ev.corpus, loaded.tokenizer, ev.tokens, ev.windows, held_out=True)
    start, exact = _start(out, trained, opt, adapted, teacher, bos, evaluation[:EXACT_WINDOWS])
    tolerance = exact_tolerance(teacher_logits(teacher, bos, evaluation[:EXACT_WINDOWS]), model.dtype)
    clock = time.perf_counter()
    _train(cfg, out, adapted, teacher, bos, train_ids, opt, trained, start, exact)
    summary = _finish(cfg, loaded, teacher, adapted, bos, evaluation, exact, time.perf_counter() - clock)
    adapter = {k: v.detach().cpu().contiguous() for k, v in mitigation.state_dict().items()}
    return RunResult(
        stamped(KIND, {**summary, "exact_check_tolerance": tolerance}), {"adapter": adapter, "prefixes": {PREFIX: bos_prefix}}
    )


KIND = "adapt-finetune"


def _batch(ids: torch.Tensor, cfg: FinetuneConfig, step: int) -> torch.Tensor:
    """The training batch of ``step`` (B, seq_len): random windows, reproducible on resume."""
    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step + 1)
    starts = torch.randint(len(ids) - cfg.seq_len, (cfg.batch,), generator=g)
    return torch.stack([ids[s : s + cfg.seq_len] for s in starts.tolist()])


def teacher_logits(teacher: nn.Module, bos: int, content: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return teacher(input_ids=prepend((bos,), content.to(teacher.device)), use_cache=False).logits[:, 1:].float()


def distillation_loss(
    student: torch.Tensor, teacher: torch.Tensor, content: torch.Tensor, lm_weight: float
) -> tuple[torch.Tensor, dict]:
    """KL(teacher || student) per position, plus ``lm_weight`` x next-token cross-entropy."""
    log_s = F.log_softmax(student.float(), dim=-1)
    kl = F.kl_div(log_s.flatten(0, 1), F.log_softmax(teacher, dim=-1).flatten(0, 1), log_target=True, reduction="batchmean")
    lm = F.cross_entropy(log_s[:, :-1].flatten(0, 1), content[:, 1:].flatten())
    return kl + lm_weight * lm, {"kl": kl.item(), "lm": lm.item()}


def _start(out: Path, trained, opt, adapted: AdaptedModel, teacher, bos: int, windows) -> tuple[int, float]:
    """(first step, step-0 logit difference): a fresh start, or the last checkpoint's (the
    pipeline resumes only a run of this configuration)."""
    ckpt = latest_checkpoint(out)
    if ckpt is None:
        adapted.mitigation.ramp = 0.0
        with torch.no_grad(), adapted.applied():
            exact = float((adapted.logits(windows).float() - teacher_logits(teacher, bos, windows)).abs().max())
        return 0, exact
    state = checkpoint_state(ckpt)
    load_checkpoint(ckpt, trained, opt)
    drop_rows_after(out / "metrics.jsonl", state["step"])
    return state["step"], state["exact_check"]


def _train(cfg, out, adapted: AdaptedModel, teacher, bos: int, ids, opt, trained, start: int, exact: float) -> None:
    bar = progress_bar(range(start, cfg.steps), initial=start, total=cfg.steps, desc=f"fine-tuning {cfg.mitigation}", unit="step")
    for step in bar:
        adapted.mitigation.ramp = ramp_at(step, cfg)
        content = _batch(ids, cfg, step).to(adapted.model.device)
        target = teacher_logits(teacher, bos, content)
        with adapted.applied():
            loss, parts = distillation_loss(adapted.logits(content), target, content, cfg.lm_weight)
        check(
            math.isfinite(parts["kl"] + parts["lm"]),
            f"the loss is {parts['kl'] + parts['lm']} at step {step}; "
            "lower --lr (or resume from the last checkpoint with a lower one)",
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        append_jsonl(
            out / "metrics.jsonl",
            {"step": step + 1, "ramp": adapted.mitigation.ramp, "loss": parts["kl"] + cfg.lm_weight * parts["lm"], **parts},
        )
        bar.set_postfix(kl=f"{parts['kl']:.3f}", ramp=f"{adapted.mitigation.ramp:.2f}")
        if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps:
            save_checkpoint(out, step + 1, trained, opt, {"exact_check": exact})
    adapted.mitigation.ramp = 1.0


def _finish(
    cfg, loaded: LoadedModel, teacher, adapted: AdaptedModel, bos: int, evaluation, exact: float, train_seconds: float
) -> dict:
    """Sink metrics and (quantized) perplexities of the original with BOS in the stream, the
    original with BOS as a cached prefix (the mitigations' step 0) and the adapted model without
    BOS: on held-out windows of the fine-tuning corpus (``ppl``) and of ``cfg.outside``
    (``ppl_outside``), where a gain from fitting the fine-tuning text cannot show."""
    ev = cfg.evaluation
    calibration = corpus_windows(ev.corpus, loaded.tokenizer, ev.tokens, ev.calibration, held_out=False)
    before = profile_original(teacher, bos, evaluation)
    after = profile_adapted(adapted, evaluation, before["super_neurons"])
    settings = (FULL_PRECISION, *ev.schemes)

    def measure_all(windows: torch.Tensor) -> dict:
        original = measure_ppl(
            teacher, [Condition("bos", lead=(bos,)), Condition("prefix", prefix=adapted.bos)], windows, calibration, settings
        )
        adapted_run = measure_ppl(adapted.model, [Condition("adapted", adapted=adapted)], windows, calibration, settings)
        return {key: {s: {**original[key][s], **adapted_run[key][s]} for s in settings} for key in ("ppl", "max_abs_activation")}

    inside = measure_all(evaluation)
    outside = (
        measure_all(corpus_windows(cfg.outside, loaded.tokenizer, ev.tokens, ev.windows, held_out=True)) if cfg.outside else None
    )
    return {
        "model": loaded.name,
        "architecture": describe_architecture(adapted.model),
        **model_facts(teacher),
        "method": "finetune",
        "mitigation": cfg.mitigation,
        "full": cfg.full,
        "steps": cfg.steps,
        "exact_check": exact,
        "train_seconds": train_seconds,
        "before": before,
        "after": after,
        "ppl": inside["ppl"],
        "max_abs_activation": inside["max_abs_activation"],
        **(
            {
                "outside_corpus": cfg.outside,
                "ppl_outside": outside["ppl"],
                "max_abs_activation_outside": outside["max_abs_activation"],
            }
            if outside
            else {}
        ),
    }


FINETUNE = register(
    Capability(
        KIND,
        FinetuneConfig,
        measure,
        write,
        tables=ADAPT_TABLES,
        write_page=page.write,
        read_data=read_data,
        check=check_exact,
        resumable=has_checkpoint,
        needs_run_dir=True,
        figures=figures,
        sections=plots.sections,
    )
)
