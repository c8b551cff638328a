"""``sinklab pretrain``: train a small modern LM with any attention variant, under one budget.

Same model, data and schedule for every variant; one flag per variant (the settings:
:mod:`.config`). A run directory holds ``config.json``, ``metrics.jsonl`` (one row per evaluation),
checkpoints (safetensors, with optimizer state; see :mod:`sinklab.core.checkpoint`) and, at the end,
``summary.json`` with the scan of the trained model. ``resume=True`` continues from the last
checkpoint and reproduces the uninterrupted loss curve: batches are a pure function of (seed, step).

Under ``torchrun --nproc-per-node N`` the same command trains with distributed data parallel
(gloo on CPU, nccl on GPU): each process takes an equal shard of the same global batch.
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from ..core.atomic import append_jsonl, read_jsonl
from ..core.checkpoint import drop_rows_after, latest_checkpoint, load_checkpoint, save_checkpoint
from ..core.errors import SinklabError, check
from ..core.orthoadam import build_optimizer
from ..core.progress import progress_bar
from ..core.results import stamped
from ..models.native import Transformer
from ..scan import scan_native
from .config import CALIBRATION_SEED, SCAN_SEED, STEPS_PER_SEED, TRAINING_SEEDS, VALIDATION_SEED, PretrainConfig
from .distributed import Dist, wrap_ddp
from .quantization import quantization_penalties
from .results import emergence_figures
from .sources import DataSource
from .tweo import block_outputs, tweo_penalty
from .value_states import value_state_drain


def lr_at(cfg: PretrainConfig, step: int) -> float:
    """Linear warmup to ``lr``, then cosine decay to ``min_lr_ratio * lr`` at the last step."""
    if step <= cfg.warmup:
        return cfg.lr * step / max(cfg.warmup, 1)
    progress = (step - cfg.warmup) / max(cfg.steps - cfg.warmup, 1)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model: Transformer, cfg: PretrainConfig) -> torch.optim.Optimizer:
    """AdamW (or OrthoAdam, its rotations drawn from the run's seed) with weight decay on matrices
    only (not on norms, biases, gates' biases or sink logits). A bias is told by its name, not its
    shape: the value gate's is (heads, 1, head_dim), and decaying it pulled every gate toward half open."""
    decay, rest = [], []
    for name, p in model.named_parameters():
        (decay if p.ndim >= 2 and not name.endswith("bias") else rest).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return build_optimizer(cfg.optimizer, groups, seed=cfg.seed, foreach=True, lr=cfg.lr, betas=(0.9, cfg.adam_beta2), eps=1e-8)


def lm_loss(model, batch: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of (B, T + 1) windows."""
    logits = model(batch[:, :-1])
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))


def training_loss(model: Transformer, ddp, batch: torch.Tensor, cfg: PretrainConfig) -> tuple[torch.Tensor, dict]:
    """The loss a step minimises and, when TWEO is on, its parts as numbers: the LM loss and TWEO's
    penalty on the blocks' outputs (the loss is LM + ``cfg.tweo`` x penalty)."""
    if not cfg.tweo:
        return lm_loss(ddp, batch), {}
    with block_outputs(model) as outputs:
        loss = lm_loss(ddp, batch)
    penalty = tweo_penalty(outputs, cfg.tweo_tau, cfg.tweo_p)
    return loss + cfg.tweo * penalty, {"lm": loss.item(), "tweo": penalty.item()}


def training_seed(seed: int, step: int) -> int:
    """The generator seed of one training step: distinct for every (seed, step) and never an
    evaluation seed (before, ``seed * 1_000_003 + step`` made step 1234 of seed 0 train on the
    validation batch)."""
    return TRAINING_SEEDS + seed * STEPS_PER_SEED + step


def step_batch(data: DataSource, cfg: PretrainConfig, step: int) -> torch.Tensor:
    """The global batch of ``step``: a pure function of (seed, step), so resuming reproduces it."""
    return data.batch("train", cfg.batch, cfg.seq_len, torch.Generator().manual_seed(training_seed(cfg.seed, step)))


def validation_batches(data: DataSource, cfg: PretrainConfig) -> list[torch.Tensor]:
    """``eval_batches`` fixed validation batches (the same for every run of the same data)."""
    g = torch.Generator().manual_seed(VALIDATION_SEED)
    return [data.batch("val", cfg.batch, cfg.seq_len, g) for _ in range(cfg.eval_batches)]


@torch.no_grad()
def validation_loss(model: Transformer, batches: list[torch.Tensor]) -> float:
    """Mean loss on the validation batches."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    losses = [lm_loss(model, b.to(device)).item() for b in batches]
    model.train(was_training)
    return sum(losses) / len(losses)


def validation_windows(data: DataSource, cfg: PretrainConfig) -> torch.Tensor:
    """(scan_batch, scan_tokens) fixed validation windows for the post-training scan."""
    length = min(cfg.scan_tokens, cfg.seq_len)
    return data.batch("val", cfg.scan_batch, length, torch.Generator().manual_seed(SCAN_SEED))[:, :length]


def calibration_windows(data: DataSource, cfg: PretrainConfig) -> torch.Tensor:
    """(scan_batch, seq_len) fixed training windows that calibrate static quantization scales."""
    return data.batch("train", cfg.scan_batch, cfg.seq_len, torch.Generator().manual_seed(CALIBRATION_SEED))[:, :-1]


def train(cfg: PretrainConfig, out: Path, resume: bool, world: Dist, data: DataSource) -> Transformer:
    """Train (or resume from the last checkpoint in ``out``) and return the model; the main process
    appends every evaluation to ``metrics.jsonl`` and saves checkpoints as it goes."""
    check(cfg.batch % world.world == 0, f"--batch {cfg.batch} is not divisible by {world.world} processes")
    data.check_windows(cfg.seq_len)
    torch.manual_seed(cfg.seed)
    model = Transformer(cfg.model_config(data.vocab_size)).to(world.device)
    opt = make_optimizer(model, cfg)
    start, carry = _start(out, model, opt, resume, world)
    ddp = wrap_ddp(model, world) if world.world > 1 else model
    bar = progress_bar(total=cfg.steps, initial=start, desc=f"pretrain {cfg.variant}", unit="step", enabled=world.main)
    clock, tokens = time.perf_counter(), 0
    for step in range(start + 1, cfg.steps + 1):
        for group in opt.param_groups:
            group["lr"] = lr_at(cfg, step)
        loss, parts = training_loss(model, ddp, world.shard(step_batch(data, cfg, step)).to(world.device), cfg)
        loss_value = world.mean(loss.item())
        if not math.isfinite(loss_value):
            last = latest_checkpoint(out)
            raise SinklabError(
                f"the loss is {loss_value} at step {step}; stopped. "
                f"The last good checkpoint is {last or 'none'} (resume from it with a lower --lr)"
            )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        carry["loss_count"] += 1
        if "tweo" in parts:  # the LM loss apart from the objective, so that runs compare
            carry["loss_sum"] += world.mean(parts["lm"])
            carry["tweo_sum"] = carry.get("tweo_sum", 0.0) + world.mean(parts["tweo"])
        else:
            carry["loss_sum"] += loss_value
        tokens += cfg.batch * cfg.seq_len
        bar.update(1)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            elapsed = time.perf_counter() - clock
            row = _evaluate(model, data, cfg, step, carry, tokens / max(elapsed, 1e-9))
            clock, tokens = time.perf_counter(), 0
            gap = {"gap": f"{row['val_loss_gap']:.3f}"} if "val_loss_gap" in row else {}
            bar.set_postfix(
                train=f"{row['train_loss']:.3f}", val=f"{row['val_loss']:.3f}", **gap, tok_s=f"{row['tokens_per_s']:.0f}"
            )
            if world.main:
                append_jsonl(out / METRICS_FILE, row)
        if world.main and (step % cfg.checkpoint_every == 0 or step == cfg.steps):
            save_checkpoint(out, step, model, opt, {"carry": carry})
    bar.close()
    return model


METRICS_FILE = "metrics.jsonl"


def _evaluate(model, data: DataSource, cfg: PretrainConfig, step: int, carry: dict, tokens_per_s: float) -> dict:
    batches = validation_batches(data, cfg)
    val = validation_loss(model, batches)
    row = {
        "step": step,
        "train_loss": carry["loss_sum"] / max(carry["loss_count"], 1),
        **({"train_tweo": carry["tweo_sum"] / max(carry["loss_count"], 1)} if "tweo_sum" in carry else {}),
        "val_loss": val,
        "val_bpb": data.bits_per_byte(val),
        "lr": lr_at(cfg, step),
        "tokens_per_s": tokens_per_s,
        **sink_snapshot(model, data, cfg),
        **{k: v for k, v in data.task_metrics(model, batches).items() if isinstance(v, float)},
    }
    carry["loss_sum"], carry["loss_count"] = 0.0, 0
    carry.pop("tweo_sum", None)
    return row


def sink_snapshot(model: Transformer, data: DataSource, cfg: PretrainConfig) -> dict:
    """The headline sink metrics now, for curves against the step (on a CPU copy of the model:
    the scan is small and the recorder keeps its statistics on the CPU)."""
    return emergence_figures(scan_native(copy.deepcopy(model).cpu(), validation_windows(data, cfg)))


def _start(out: Path, model, opt, resume: bool, world: Dist) -> tuple[int, dict]:
    """Fresh start, or the state of the last checkpoint when resuming (the pipeline resumes only a
    run of this configuration; the checkpoint's tensors must fit the model built from it)."""
    fresh = {"loss_sum": 0.0, "loss_count": 0}
    if not resume:
        return 0, fresh
    ckpt = latest_checkpoint(out)
    check(ckpt is not None, f"nothing to resume in {out}: it holds no checkpoint")
    saved = load_checkpoint(ckpt, model, opt)
    step = saved["step"]
    if world.main:
        drop_rows_after(out / METRICS_FILE, step)
    return step, saved.get("carry", fresh)


def finish(model: Transformer, data: DataSource, cfg: PretrainConfig, out: Path) -> dict:
    """The summary of a trained model: its final losses (from ``metrics.jsonl``) and a scan on
    validation windows (small: ``scan_batch`` x ``scan_tokens``, on the CPU wherever training ran)."""
    device, dtype = next(model.parameters()).device, next(model.parameters()).dtype
    model = model.cpu()
    rows = read_jsonl(out / METRICS_FILE)
    batches, windows = validation_batches(data, cfg), validation_windows(data, cfg)
    summary = {
        "model": f"sinklab.Transformer ({cfg.variant})",
        "dtype": str(dtype).removeprefix("torch."),
        "device": str(device),
        **cfg.attention.flags(),
        "sink_tokens": cfg.sink_tokens,
        "variant": cfg.variant,
        "seed": cfg.seed,
        "steps": cfg.steps,
        "parameters": sum(p.numel() for p in model.parameters()),
        "final_val_loss": rows[-1]["val_loss"],
        "final_val_bpb": rows[-1]["val_bpb"],
        "unigram_val_loss": data.unigram_val_loss(),
        **data.task_metrics(model, batches),
        "tokens_per_s": sum(r["tokens_per_s"] for r in rows) / len(rows),
        **scan_native(model, windows, decode=data.decode),
        "value_state_drain": value_state_drain(model, windows),
        "quantization": quantization_penalties(model, lambda: validation_loss(model, batches), calibration_windows(data, cfg)),
    }
    summary.update(emergence_figures(summary))
    return stamped("pretrain", summary)
