"""Train and evaluate models on the trigger-conditional task (Ran-Milo 2026).

The paper's recipe, as defaults: MSE over all positions; Adam with betas (0.9, 0.95) and no
weight decay; lr 1e-3 for one layer and 1e-4 for several; batch 128; at most 50,000 steps;
stop as soon as the largest absolute error on a training batch falls below 5e-3. Evaluation uses
1,000 fixed sequences with the trigger at 0-indexed position 7.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Iterable, Optional, Sequence

import torch

from .attention import ATTN_NORMS, check_attn_name
from .errors import SinklabError, check
from .hooks import HookFn, hook_name
from .model import ModelConfig, Transformer
from .tasks import BOS, TriggerTask

EVAL_SEED = 20260311  # one fixed evaluation set for every model, so runs compare on equal terms


@dataclass
class TriggerConfig:
    """One model on the trigger task: architecture, task and training recipe."""

    layers: int = 1
    heads: int = 1
    attn: str = "softmax"
    gate: bool = False
    head_norm: bool = False
    seed: int = 0
    n: int = 16
    length: int = 16
    eval_trigger: int = 7
    eval_sequences: int = 1000
    lr: Optional[float] = None  # None: 1e-3 for one layer, 1e-4 for more (the paper's values)
    batch: int = 128
    max_steps: int = 50_000
    stop_max_abs_error: float = 5e-3
    sink_threshold: float = 0.5
    # ablations, all off in the paper
    scale_scores: bool = False
    bias: bool = False
    rope: bool = False
    mlp: bool = False
    # theory check: cap the attention on BOS at query rows >= 1 (None: no cap)
    bos_cap: Optional[float] = None
    compile: str = "auto"  # torch.compile the training step: auto (multi-layer), on, off
    attn_options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_attn_name(self.attn)
        check(self.layers >= 1, f"--layers must be at least 1, got {self.layers}")
        check(self.heads >= 1, f"--heads must be at least 1, got {self.heads}")
        check(self.max_steps >= 1, f"--max-steps must be at least 1, got {self.max_steps}")
        check(self.batch >= 1, f"--batch must be at least 1, got {self.batch}")
        check(self.eval_sequences >= 1, f"the number of evaluation sequences must be positive, got {self.eval_sequences}")
        check(self.bos_cap is None or 0.0 < self.bos_cap <= 1.0, f"the BOS cap must lie in (0, 1], got {self.bos_cap}")
        check(self.compile in ("auto", "on", "off"), f"compile must be auto, on or off, got {self.compile!r}")
        if self.lr is None:
            self.lr = 1e-3 if self.layers == 1 else 1e-4
        TriggerTask(self.n, self.length, self.eval_trigger)  # validates n, L and the evaluation trigger

    @property
    def residual(self) -> bool:
        """Multi-layer models use residual connections (and residual targets), as in the paper."""
        return self.layers > 1

    @property
    def task(self) -> TriggerTask:
        return TriggerTask(self.n, self.length, self.eval_trigger, residual=self.residual)

    @property
    def key(self) -> str:
        """A short unique name, used for file names and tables."""
        extras = "".join(["+gate" if self.gate else "", "+hnorm" if self.head_norm else ""])
        cap = f"_cap{self.bos_cap:g}" if self.bos_cap is not None else ""
        return f"{self.attn}{extras}_{self.layers}x{self.heads}{cap}_seed{self.seed}"

    def model_config(self) -> ModelConfig:
        return ModelConfig(
            d_model=self.n,
            n_layers=self.layers,
            n_heads=self.heads,
            head_dim=self.n,  # full-width heads, as in the paper
            attn=self.attn,
            attn_options=dict(self.attn_options),
            gate=self.gate,
            head_norm=self.head_norm,
            residual=self.residual,
            mlp=self.mlp,
            rope=self.rope,
            bias=self.bias,
            scale_scores=self.scale_scores,
            max_seq_len=self.length,
        )

    def to_dict(self) -> dict:
        return asdict(self)


def cap_first_key(cap: float) -> HookFn:
    """Hook on ``attn.hook_pattern`` capping the weight on key 0 at ``cap`` for query rows >= 1.

    The excess is moved to the other visible keys in proportion to their weights, so rows keep
    their sum and the cap is a hard, differentiable constraint (row 0 sees only BOS: untouched).
    """

    def hook(weights: torch.Tensor, point) -> torch.Tensor:
        first, rest = weights[..., :1], weights[..., 1:]
        rest_sum = rest.sum(-1, keepdim=True)
        rows = torch.arange(weights.shape[-2], device=weights.device) + point.q_start
        movable = (rows >= 1).view(-1, 1) & (rest_sum > 0)
        excess = torch.where(movable, (first - cap).clamp_min(0.0), torch.zeros_like(first))
        grow = 1.0 + excess / rest_sum.clamp_min(1e-30)
        return torch.cat([first - excess, rest * grow], dim=-1)

    return hook


def constraint_hooks(cfg: TriggerConfig) -> list[tuple[str, HookFn]]:
    """Hooks that are part of the model definition (the BOS cap), for training and evaluation."""
    if cfg.bos_cap is None:
        return []
    return [(hook_name("*", "attn.hook_pattern"), cap_first_key(cfg.bos_cap))]


@dataclass
class TrainLog:
    steps: int
    converged: bool
    final_loss: float
    final_max_abs_error: float
    seconds: float


def train_trigger(cfg: TriggerConfig) -> tuple[Transformer, TrainLog]:
    """Train one model with the paper's recipe; stop at the error rule or ``max_steps``."""
    torch.manual_seed(cfg.seed)
    model = Transformer(cfg.model_config())
    data = torch.Generator().manual_seed(cfg.seed + 1)
    task = cfg.task
    start, step, loss_value, max_err = time.perf_counter(), 0, float("nan"), float("inf")
    with model.hooks.attached(constraint_hooks(cfg)):
        train_step = AdamStep(model, cfg.lr, cfg.stop_max_abs_error, mode=step_mode(cfg))
        for step in range(1, cfg.max_steps + 1):
            batch = task.sample(cfg.batch, data)
            loss_value, max_err = train_step(batch.x, batch.y, step)
            if not math.isfinite(loss_value):
                raise SinklabError(f"training {cfg.key} diverged: the loss is {loss_value} at step {step}")
            if max_err < cfg.stop_max_abs_error:
                break
    converged = max_err < cfg.stop_max_abs_error
    return model, TrainLog(step, converged, loss_value, max_err, time.perf_counter() - start)


def step_mode(cfg: TriggerConfig) -> str:
    """``compiled`` for multi-layer models, which run for thousands of steps, else ``autograd``.

    Compiling costs 20-40 s once and then makes a step about twice as fast; one-layer models
    finish in about a thousand steps, too few to pay it back.
    """
    compiled = {"auto": cfg.layers > 1, "on": True, "off": False}[cfg.compile]
    return "compiled" if compiled else "autograd"


class AdamStep:
    """One training step: forward, backward and torch.optim.Adam's update with betas (0.9, 0.95).

    A batch whose largest absolute error is already below ``stop_below`` leaves the weights
    untouched: under the paper's rule that batch ends training. Modes:

    * ``autograd``: plain autograd and ``torch.optim.Adam`` (the reference);
    * ``fused``: the whole step as one function, with a functional copy of Adam's update
      (bias-corrected, eps outside the square root, no weight decay);
    * ``compiled``: the fused step through torch.compile, which removes the per-operation
      overhead that dominates models this small (falls back to ``fused`` where compiling fails).
    """

    betas = (0.9, 0.95)
    eps = 1e-8

    MODES = ("autograd", "fused", "compiled")

    def __init__(self, model: Transformer, lr: float, stop_below: float, mode: str = "autograd") -> None:
        if mode not in self.MODES:
            raise ValueError(f"mode must be one of {self.MODES}, got {mode!r}")
        self.model, self.lr, self.stop_below, self.fused = model, lr, stop_below, mode != "autograd"
        if self.fused:
            self.params = {k: p.detach() for k, p in model.named_parameters()}  # shared storage
            self.exp_avg = {k: torch.zeros_like(p) for k, p in self.params.items()}
            self.exp_avg_sq = {k: torch.zeros_like(p) for k, p in self.params.items()}
            self._grad = torch.func.grad_and_value(self._loss, has_aux=True)
            self._fused = self._compile(self._fused_update) if mode == "compiled" else self._fused_update
        else:
            self.opt = torch.optim.Adam(model.parameters(), lr=lr, betas=self.betas, eps=self.eps, weight_decay=0.0, foreach=True)

    def __call__(self, x: torch.Tensor, y: torch.Tensor, step: int) -> tuple[float, float]:
        """One step on batch (x, y); returns the batch's MSE and largest absolute error."""
        if self.fused:
            loss, max_err = self._fused(self.params, self.exp_avg, self.exp_avg_sq, torch.tensor(float(step)), x, y)
        else:
            loss, max_err = self._autograd_update(x, y)
        return tuple(torch.stack([loss.detach(), max_err]).tolist())

    def _autograd_update(self, x, y):
        err = self.model(x) - y
        loss, max_err = err.pow(2).mean(), err.detach().abs().max()
        if max_err >= self.stop_below:
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
        return loss, max_err

    def _loss(self, params, x, y):
        err = torch.func.functional_call(self.model, params, (x,)) - y
        return err.pow(2).mean(), err.detach().abs().max()

    def _fused_update(self, params, exp_avg, exp_avg_sq, step, x, y):
        grads, (loss, max_err) = self._grad(params, x, y)
        apply = max_err >= self.stop_below
        beta1, beta2 = self.betas
        step_size = self.lr / (1 - beta1**step)
        bias_correction2_sqrt = (1 - beta2**step).sqrt()
        for name, grad in grads.items():
            m = torch.lerp(exp_avg[name], grad, 1 - beta1)
            v = exp_avg_sq[name] * beta2 + grad * grad * (1 - beta2)
            p = params[name] - step_size * m / (v.sqrt() / bias_correction2_sqrt + self.eps)
            for state, new in ((params[name], p), (exp_avg[name], m), (exp_avg_sq[name], v)):
                state.copy_(torch.where(apply, new, state))
        return loss, max_err

    @staticmethod
    def _compile(fn):
        """``torch.compile(fn)``, falling back to ``fn`` (with a warning) where compiling fails.

        Dynamo's caches are reset first: a worker trains many models in turn, and guards piling up
        from earlier models would hit the recompile limit and silently fall back to eager mode.
        """
        torch._dynamo.reset()
        compiled = torch.compile(fn, dynamic=False)

        def run(*args):
            nonlocal compiled
            try:
                return compiled(*args)
            except Exception as exc:  # no C++ compiler, unsupported platform, ...
                if compiled is fn:
                    raise
                warnings.warn(f"torch.compile failed ({type(exc).__name__}); training uncompiled", stacklevel=2)
                compiled = fn
                return fn(*args)

        return run


@torch.no_grad()
def evaluate_trigger(model: Transformer, cfg: TriggerConfig, extra_hooks: Sequence = ()) -> dict:
    """Error and per-head attention statistics on the fixed evaluation set.

    Non-trigger rows are the query rows 1..L-1 other than the trigger (row 0 can only see BOS).
    ``extra_hooks`` (e.g. interventions) are attached for the evaluation. Returns the metrics
    plus ``maps``: mean and std attention (L, H, T, T) over the sequences.
    """
    task = cfg.task
    batch = task.sample(cfg.eval_sequences, torch.Generator().manual_seed(EVAL_SEED), trigger=cfg.eval_trigger)
    inputs: dict[int, torch.Tensor] = {0: batch.x}

    def keep_input(x, point):
        inputs[point.layer + 1] = x

    with model.hooks.attached([*constraint_hooks(cfg), *extra_hooks, (hook_name("*", "hook_resid_post"), keep_input)]):
        out, weights = model(batch.x, need_weights=True)
    err = out - batch.y
    non_trigger = task.non_trigger_rows(batch.trigger)  # (B, L)
    sq = err.pow(2).mean(-1)  # (B, L)
    rows = torch.arange(task.length)
    heads = []
    for layer, w in enumerate(weights):  # w: (B, H, L, L)
        gates = _gate_values(model, layer, inputs[layer])  # (B, L, H) or None
        heads.extend(_head_stats(w, gates, non_trigger, cfg, layer, rows == cfg.eval_trigger))
    stacked = torch.stack(weights, dim=1)  # (B, layers, H, L, L)
    return {
        "eval_mse": err.pow(2).mean().item(),
        "eval_max_abs_error": err.abs().max().item(),
        "mse_nontrigger": sq[non_trigger].mean().item(),
        "mse_trigger": sq[:, cfg.eval_trigger].mean().item(),
        "heads_detail": heads,
        "maps": {"mean": stacked.mean(0), "std": stacked.std(0)},
    }


def _gate_values(model: Transformer, layer: int, block_input: torch.Tensor) -> Optional[torch.Tensor]:
    head_out = model.blocks[layer].attn.head_out
    return head_out.gate_values(block_input) if head_out.gate is not None else None


def _head_stats(w, gates, non_trigger, cfg: TriggerConfig, layer: int, trigger_row) -> list[dict]:
    """Per-head BOS mass, row mass and gate statistics (see :func:`evaluate_trigger`)."""
    implicit_slot = ATTN_NORMS[cfg.attn].implicit_slot
    stats = []
    nt = non_trigger.unsqueeze(1).float()  # (B, 1, L)
    n_rows = nt.sum()
    bos = w[..., BOS]  # (B, H, L): weight each query row puts on BOS
    row_mass = w.sum(-1)  # (B, H, L)
    bos_by_row = bos.mean(0)  # (H, L)
    for h in range(w.shape[1]):
        bos_nt = (bos[:, h] * nt[:, 0]).sum() / n_rows
        rows_seen = non_trigger[0]
        record = {
            "layer": layer,
            "head": h,
            "bos_mass_nontrigger": bos_nt.item(),
            "bos_mass_nontrigger_min": bos_by_row[h][rows_seen].min().item(),
            "bos_mass_trigger": bos[:, h, trigger_row].mean().item(),
            "sinks": bool(bos_nt.item() >= cfg.sink_threshold),
            "row_mass_nontrigger": ((row_mass[:, h] * nt[:, 0]).sum() / n_rows).item(),
            "gate_nontrigger": ((gates[..., h] * nt[:, 0]).sum() / n_rows).item() if gates is not None else None,
        }
        record["do_nothing"] = classify_do_nothing(record, implicit_slot)
        stats.append(record)
    return stats


def classify_do_nothing(head: dict, implicit_slot: bool, high: float = 0.5, closed: float = 0.1) -> str:
    """Where a head puts its "do nothing" at non-trigger rows.

    * ``BOS``: at least ``high`` of the attention goes to BOS (a sink);
    * ``implicit slot``: at least ``high`` of the probability mass is left out of the visible keys
      (the extra logit of softmax1 / sink_logit);
    * ``closed gate``: the head's gate is below ``closed`` on average;
    * ``nowhere``: the weights themselves are small (total below 1 - high) and there is no slot;
    * ``content``: none of these: the head spreads weight over content tokens.
    """
    if head["bos_mass_nontrigger"] >= high:
        return "BOS"
    if head["gate_nontrigger"] is not None and head["gate_nontrigger"] < closed:
        return "closed gate"
    if head["row_mass_nontrigger"] <= 1.0 - high:
        return "implicit slot" if implicit_slot else "nowhere"
    return "content"


def trigger_record(cfg: TriggerConfig, log: TrainLog, metrics: dict) -> dict:
    """One ``runs`` entry of ``summary.json`` (the documented contract plus extras)."""
    return {
        "key": cfg.key,
        "attn": cfg.attn,
        "gate": cfg.gate,
        "head_norm": cfg.head_norm,
        "layers": cfg.layers,
        "heads": cfg.heads,
        "seed": cfg.seed,
        "bos_cap": cfg.bos_cap,
        "steps": log.steps,
        "converged": log.converged,
        "train_seconds": round(log.seconds, 3),
        "final_train_max_abs_error": log.final_max_abs_error,
        "eval_mse": metrics["eval_mse"],
        "eval_max_abs_error": metrics["eval_max_abs_error"],
        "heads_detail": metrics["heads_detail"],
    }


def summarise_seeds(records: Iterable[dict]) -> list[dict]:
    """Mean and std across seeds of every numeric metric, per (attn, extras, layers, heads, cap)."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["attn"], r["gate"], r["head_norm"], r["layers"], r["heads"], r["bos_cap"]), []).append(r)
    out = []
    for (attn, gate, head_norm, layers, heads, cap), rs in groups.items():
        row = {"attn": attn, "gate": gate, "head_norm": head_norm, "layers": layers, "heads": heads, "bos_cap": cap, "seeds": [r["seed"] for r in rs]}
        per_run = {
            "steps": [r["steps"] for r in rs],
            "eval_mse": [r["eval_mse"] for r in rs],
            "eval_max_abs_error": [r["eval_max_abs_error"] for r in rs],
            "bos_mass_nontrigger": [_mean(h["bos_mass_nontrigger"] for h in r["heads_detail"]) for r in rs],
            "sinking_heads": [sum(h["sinks"] for h in r["heads_detail"]) for r in rs],
        }
        for name, values in per_run.items():
            t = torch.tensor(values, dtype=torch.float64)
            row[f"{name}_mean"] = t.mean().item()
            row[f"{name}_std"] = t.std().item() if len(values) > 1 else 0.0
        out.append(row)
    return out


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values)
