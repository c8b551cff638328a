"""Training one trigger model with the paper's recipe and stopping rule (see :mod:`.config`)."""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from functools import partial
from typing import Optional

import torch
from torch.utils._pytree import tree_leaves

from ..core.errors import SinklabError
from ..models.native import Transformer
from .config import TriggerConfig, constraint_hooks

BETAS = (0.9, 0.95)  # the paper's Adam betas
EPS = 1e-8


@dataclass
class TrainLog:
    steps: int
    converged: bool
    final_loss: float
    final_max_abs_error: float
    seconds: float
    step_mode: str
    compile_fallback: Optional[str] = None  # why torch.compile failed, when the step ran uncompiled


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
    seconds = time.perf_counter() - start
    return model, TrainLog(step, converged, loss_value, max_err, seconds, train_step.mode, train_step.compile_fallback)


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
    * ``fused``: the whole step as one function, with Adam's update written functionally
      (:func:`adam_update`);
    * ``compiled``: the fused step through torch.compile, which removes the per-operation
      overhead that dominates models this small (falls back to ``fused`` where compiling fails).
    """

    MODES = ("autograd", "fused", "compiled")

    def __init__(self, model: Transformer, lr: float, stop_below: float, mode: str = "autograd") -> None:
        if mode not in self.MODES:
            raise ValueError(f"mode must be one of {self.MODES}, got {mode!r}")
        self.model, self.lr, self.stop_below, self.mode = model, lr, stop_below, mode
        if self.fused:
            self.params = {k: p.detach() for k, p in model.named_parameters()}  # shared storage
            self.exp_avg = {k: torch.zeros_like(p) for k, p in self.params.items()}
            self.exp_avg_sq = {k: torch.zeros_like(p) for k, p in self.params.items()}
            self._grad = torch.func.grad_and_value(partial(batch_loss, model), has_aux=True)
            self._fused = CompiledStep(self._fused_update) if mode == "compiled" else self._fused_update
        else:
            self.opt = torch.optim.Adam(model.parameters(), lr=lr, betas=BETAS, eps=EPS, weight_decay=0.0, foreach=True)

    @property
    def compile_fallback(self) -> Optional[str]:
        """Why torch.compile failed, when the step runs uncompiled."""
        return getattr(self._fused, "fallback", None) if self.fused else None

    @property
    def fused(self) -> bool:
        return self.mode != "autograd"

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

    def _fused_update(self, params, exp_avg, exp_avg_sq, step, x, y):
        grads, (loss, max_err) = self._grad(params, x, y)
        adam_update(params, exp_avg, exp_avg_sq, grads, step, max_err >= self.stop_below, self.lr)
        return loss, max_err


def batch_loss(model: Transformer, params: dict, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's MSE (the training loss) and its largest absolute error (the stopping rule)."""
    err = torch.func.functional_call(model, params, (x,)) - y
    return err.pow(2).mean(), err.detach().abs().max()


def adam_update(
    params: dict, exp_avg: dict, exp_avg_sq: dict, grads: dict, step: torch.Tensor, apply: torch.Tensor, lr: float
) -> None:
    """torch.optim.Adam's update (bias-corrected, eps outside the square root, no weight decay)
    written functionally, in place, where ``apply`` is true.

    ``apply`` is a scalar for one model or (S,) for an ensemble whose tensors are stacked (S, ...):
    a member whose batch already meets the stopping rule, or that has stopped, keeps its weights
    and optimizer state.
    """
    beta1, beta2 = BETAS
    step_size = lr / (1 - beta1**step)
    bias_correction2_sqrt = (1 - beta2**step).sqrt()
    for name, grad in grads.items():
        mask = apply.view(*apply.shape, *[1] * (grad.ndim - apply.ndim))
        m = torch.lerp(exp_avg[name], grad, 1 - beta1)
        v = exp_avg_sq[name] * beta2 + grad * grad * (1 - beta2)
        p = params[name] - step_size * m / (v.sqrt() / bias_correction2_sqrt + EPS)
        for state, new in ((params[name], p), (exp_avg[name], m), (exp_avg_sq[name], v)):
            state.copy_(torch.where(mask, new, state))


class CompiledStep:
    """``torch.compile(fn)``, falling back to ``fn`` where compiling fails: the reason is kept in
    :attr:`fallback` (and so in the run's records) and warned about once.

    Only what torch.compile raises while tracing or compiling is a reason to train uncompiled:
    Dynamo's errors (``TorchDynamoException``; a backend's, such as inductor's missing C++
    compiler, arrive wrapped in its subclass ``BackendCompilerFailed``). Anything else (out of
    memory, a bug in the step) propagates.

    The step updates its tensor arguments in place, so a failed call may be retried only if it
    wrote nothing. ``fullgraph=True`` makes the step one graph, traced and compiled (also when a
    new stack size recompiles it) before any of it runs; and the arguments' version counters,
    which every in-place write bumps, are compared before falling back: a compile error after a
    write, or any other error, is raised, never retried.

    Dynamo's caches are reset first: a worker trains many models in turn, and guards piling up
    from earlier models would hit the recompile limit and silently fall back to eager mode.
    """

    def __init__(self, fn) -> None:
        torch._dynamo.reset()
        self.fn, self.compiled = fn, torch.compile(fn, dynamic=False, fullgraph=True)
        self.fallback: Optional[str] = None

    def __call__(self, *args):
        if self.fallback is not None:
            return self.fn(*args)
        before = tensor_versions(args)
        try:
            return self.compiled(*args)
        except torch._dynamo.exc.TorchDynamoException as exc:  # imported by __init__'s reset, not at import time
            if tensor_versions(args) != before:
                raise
            self.fallback = compile_failure(exc)
            warnings.warn(f"torch.compile failed ({self.fallback}); training uncompiled", stacklevel=2)
            return self.fn(*args)


def compile_failure(exc: Exception) -> str:
    """One line for the records: the error; for a backend's failure the backend's own error
    (``BackendCompilerFailed``'s first line only names the backend); for Dynamo's refusal to trace,
    its explanation (which operator) and the line of the step where it stopped (a lent GPU's torch
    2.11 failed with the first line alone, "Failed to trace builtin operator", naming neither)."""

    def first_line(error: BaseException) -> str:
        return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"

    inner = getattr(exc, "inner_exception", None)
    if inner is not None:
        return f"{type(exc).__name__} ({first_line(inner)})"[:300]
    lines = [line.strip() for line in str(exc).strip().splitlines()]
    where = [line for line in lines if line.startswith("File ")][-1:]  # the user code's innermost frame
    return "; ".join([first_line(exc), *[line for line in lines if line.startswith("Explanation:")], *where])[:600]


def tensor_versions(args) -> list[int]:
    """The version counter of every tensor in ``args`` (nested in dicts, lists, tuples)."""
    return [leaf._version for leaf in tree_leaves(args) if isinstance(leaf, torch.Tensor)]
