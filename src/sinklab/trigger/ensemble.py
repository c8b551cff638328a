"""Many seeds of one trigger configuration trained as one batched computation.

The members of an ensemble share every setting but the seed. Their weights and Adam state are
stacked (S, ...), and one step (forward, backward and Adam for every member, vmapped over the
members and compiled) trains them all. Each member starts from its own seeded initialisation and
draws its batches from its own seeded stream, exactly as :func:`~.train.train_trigger` does, so it
follows the trajectory of its seed trained alone, to float rounding.

Each member keeps the paper's stopping rule on its own: the step at which its training batch's
largest error falls below the threshold leaves its weights untouched (a masked update) and ends
its training; it reports its own step count. Stopped members are dropped from the stack once they
are half of it, so the slowest seed does not make the finished ones cost compute, and the step
is recompiled at most log2(S) times.

Compiling follows :func:`~.train.step_mode`: one-layer ensembles run eagerly (they stop after about
a thousand steps, too few to pay for compiling once per stack size), deeper ones compiled.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import Optional, Sequence

import torch

from ..core.errors import SinklabError, check
from ..core.jobs import default_workers
from ..models.native import Transformer
from .config import TriggerConfig, constraint_hooks
from .train import CompiledStep, TrainLog, adam_update, batch_loss, step_mode, train_trigger

MAX_MEMBERS = 64  # members per ensemble job; more seeds are split into several jobs
MEMORY_SAFETY = 1.5  # headroom over the estimate below, for the allocator and autograd's temporaries
PROCESS_BYTES = 2**30  # a training process's own share: torch itself, and torch.compile's tracing


def ensemble_key(cfg: TriggerConfig) -> str:
    """Configs with the same key differ only in their seed, so they can train as one ensemble."""
    return json.dumps(replace(cfg, seed=0).to_dict(), sort_keys=True)


def train_members(configs: Sequence[TriggerConfig], device: str = "cpu") -> list[tuple[Transformer, TrainLog]]:
    """Train configs that differ only in their seed: one alone, several as an ensemble."""
    if len(configs) == 1 and device == "cpu":
        return [train_trigger(configs[0])]
    return Ensemble(configs, device).train()


class Ensemble:
    """S seeds of one configuration, stacked; see the module docstring."""

    def __init__(self, configs: Sequence[TriggerConfig], device: str = "cpu") -> None:
        check(len({ensemble_key(c) for c in configs}) == 1, "an ensemble's members may differ only in their seed")
        check(len({c.seed for c in configs}) == len(configs), "an ensemble's seeds must be distinct")
        self.configs, self.device, self.cfg = list(configs), torch.device(device), configs[0]
        self.models = []
        for cfg in self.configs:
            torch.manual_seed(cfg.seed)  # the same initialisation as train_trigger
            self.models.append(Transformer(cfg.model_config()).to(self.device))
        self.generators = [torch.Generator().manual_seed(c.seed + 1) for c in self.configs]
        self.active = list(range(len(self.configs)))  # members in the stack, in stack order
        self.params = {k: v.detach() for k, v in torch.func.stack_module_state(self.models)[0].items()}
        self.exp_avg = {k: torch.zeros_like(v) for k, v in self.params.items()}
        self.exp_avg_sq = {k: torch.zeros_like(v) for k, v in self.params.items()}
        self.stopped = [False] * len(self.active)  # per slot of the stack
        self.mode = "compiled" if step_mode(self.cfg) == "compiled" else "fused"
        grad = torch.func.grad_and_value(partial(batch_loss, self.models[0]), has_aux=True)
        self._grad = torch.func.vmap(grad)
        self._step = CompiledStep(self._update) if self.mode == "compiled" else self._update

    def _update(self, params, exp_avg, exp_avg_sq, step, x, y):
        """One step for every member in the stack. A member whose batch meets the stopping rule
        keeps its weights (the masked update); they are copied out and it never reads the stack
        again, so a stopped member's slot needs no mask until the next compaction drops it."""
        grads, (loss, max_err) = self._grad(params, x, y)
        adam_update(params, exp_avg, exp_avg_sq, grads, step, max_err >= self.cfg.stop_max_abs_error, self.cfg.lr)
        return loss, max_err

    def train(self) -> list[tuple[Transformer, TrainLog]]:
        """Train until every member meets the stopping rule or the step budget is spent."""
        start = time.perf_counter()
        logs: dict[int, TrainLog] = {}
        with self.models[0].hooks.attached(constraint_hooks(self.cfg)):
            for step in range(1, self.cfg.max_steps + 1):
                batch = self.cfg.task.sample_stacked(self.cfg.batch, [self.generators[i] for i in self.active])
                x, y = batch.x.to(self.device), batch.y.to(self.device)
                step_tensor = torch.tensor(float(step), device=self.device)
                loss, max_err = self._step(self.params, self.exp_avg, self.exp_avg_sq, step_tensor, x, y)
                self._stop_members(step, torch.stack([loss, max_err], dim=1).tolist(), logs, start)
                if len(logs) == len(self.configs):
                    break
                if sum(self.stopped) * 2 >= len(self.active):
                    self._compact()
        return [(model, logs[i]) for i, model in enumerate(self.models)]

    def _stop_members(self, step: int, results: list[list[float]], logs: dict[int, TrainLog], start: float) -> None:
        """Log and freeze every member whose batch met the stopping rule, or all at the budget's end."""
        for slot, (member, (loss, err)) in enumerate(zip(self.active, results)):
            if member in logs:
                continue
            if not math.isfinite(loss):
                raise SinklabError(f"training {self.configs[member].key} diverged: the loss is {loss} at step {step}")
            if err < self.cfg.stop_max_abs_error or step == self.cfg.max_steps:
                logs[member] = self._log(step, loss, err, start)
                self._keep_weights(slot, member)
                self.stopped[slot] = True

    def _log(self, step: int, loss: float, err: float, start: float) -> TrainLog:
        fallback = getattr(self._step, "fallback", None)
        return TrainLog(
            step, err < self.cfg.stop_max_abs_error, loss, err, time.perf_counter() - start, f"ensemble-{self.mode}", fallback
        )

    def _keep_weights(self, slot: int, member: int) -> None:
        """Copy a stopped member's weights from the stack into its own model."""
        with torch.no_grad():
            for name, p in self.models[member].named_parameters():
                p.copy_(self.params[name][slot])

    def _compact(self) -> None:
        """Drop the stopped members from the stack (the step recompiles for the new size)."""
        slots = [slot for slot, stopped in enumerate(self.stopped) if not stopped]
        keep = torch.tensor(slots, device=self.device)
        self.active = [self.active[slot] for slot in slots]
        for state in (self.params, self.exp_avg, self.exp_avg_sq):
            for name in state:
                state[name] = state[name].index_select(0, keep)
        self.stopped = [False] * len(slots)


def estimate_bytes(cfg: TriggerConfig, members: int) -> int:
    """Memory an ensemble step needs, estimated from the shapes (float32).

    Per member: weights, gradients and two Adam moments; the batch and its targets; and, per layer,
    the activations autograd keeps (block input, q/k/v, scores and weights, head outputs) and their
    gradients. ``MEMORY_SAFETY`` covers what this leaves out.
    """
    d, heads, length, batch = cfg.n, cfg.heads, cfg.length, cfg.batch
    weights = cfg.layers * (3 * heads * d * d + heads * d * d)
    if cfg.mlp:
        hidden = cfg.model_config().mlp_hidden
        weights += cfg.layers * 3 * d * hidden
    per_layer = batch * length * (d + 3 * heads * d + heads * d + d) + 2 * batch * heads * length * length
    floats = 4 * weights + 2 * batch * length * d + 2 * cfg.layers * per_layer
    return int(4 * floats * members * MEMORY_SAFETY)


def available_bytes(device: str = "cpu") -> int:
    """Memory the device can give: free GPU memory, or on the CPU what the system can give without
    swapping (Linux: MemAvailable; elsewhere: physical memory)."""
    if device != "cpu":
        return torch.cuda.mem_get_info(torch.device(device))[0]
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_memory(jobs: Sequence[Sequence[TriggerConfig]], parallel: int, device: str = "cpu") -> None:
    """Refuse, with the estimate, jobs that would not fit in the device's memory when ``parallel``
    of the largest run at once."""
    sizes = sorted((estimate_bytes(job[0], len(job)) for job in jobs), reverse=True)
    need, have = sum(sizes[:parallel]) + PROCESS_BYTES * min(parallel, len(jobs)), available_bytes(device)
    if need > have:
        largest = max(jobs, key=lambda job: estimate_bytes(job[0], len(job)))
        raise SinklabError(
            f"training {largest[0].key.rsplit('_seed', 1)[0]} with {len(largest)} seed(s) per job, "
            f"{min(parallel, len(jobs))} job(s) at a time, needs about {need / 2**30:.1f} GiB (estimate), "
            f"more than the {have / 2**30:.1f} GiB available; "
            "use fewer seeds or workers, or a smaller model"
        )


@dataclass(frozen=True)
class Placement:
    """Where and how a grid trains: ``workers`` processes (default one per core; one for a GPU),
    whether the seeds of a configuration train as ensembles (default: on a GPU only), and torch's
    ``threads`` in each job (``--threads``).

    On the 2-core CPU of BENCHMARKS.md one model's step already keeps a core busy, so an ensemble
    costs each member about what training it alone costs, and independent single-model jobs
    balance better over the processes: eight seeds of softmax 2x2 took 1.6x longer as ensembles.
    On a GPU, where one tiny model leaves the device idle, the ensemble is the point.
    """

    workers: Optional[int] = None
    device: str = "cpu"
    ensembles: Optional[bool] = None
    threads: Optional[int] = None  # torch's threads in each job (None: the worker's, 1 side by side)

    @property
    def processes(self) -> int:
        return 1 if self.device != "cpu" else (self.workers or default_workers())

    @property
    def max_members(self) -> int:
        use = self.device != "cpu" if self.ensembles is None else self.ensembles
        return MAX_MEMBERS if use else 1

    def jobs(self, configs: Sequence[TriggerConfig]) -> list[list[TriggerConfig]]:
        """Configs that differ only in their seed grouped into ensembles of at most
        ``max_members``; the largest are halved until every process has a job."""
        groups: dict[str, list[TriggerConfig]] = {}
        for cfg in configs:
            groups.setdefault(ensemble_key(cfg), []).append(cfg)
        size = self.max_members
        jobs = [members[i : i + size] for members in groups.values() for i in range(0, len(members), size)]
        while jobs and len(jobs) < self.processes and max(len(job) for job in jobs) > 1:
            largest = max(jobs, key=len)
            jobs.remove(largest)
            half = (len(largest) + 1) // 2
            jobs += [largest[:half], largest[half:]]
        return jobs
