"""Where attention and activations go, before and after adaptation: a compact probe on the
attention and FFN hook points (the scanner's metric formulas, on inputs that may start after a
cached prefix).

Per layer and head: the mass on the first token of the stream (BOS before adaptation, the first
content token after), Gu et al.'s Sink_1^0.3 over those masses, and the slot mass (what no stream
token receives: an implicit slot or the cached prefix). Per layer: the largest |residual|, and
the activations of the super neurons found before adaptation.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Callable, Optional

import torch
from torch import nn

from ..core.hooks import HookSet, hook_name
from ..models.hf import down_proj_weight, instrument
from ..scan import MetricSettings, sink_rate, super_neurons
from .evaluate import prepend

SETTINGS = MetricSettings()


class _Sums:
    def __init__(self) -> None:
        self.first: dict[int, torch.Tensor] = {}
        self.slot: dict[int, torch.Tensor] = {}
        self.resid: dict[int, float] = {}
        self.act_first: dict[int, torch.Tensor] = {}
        self.act_rest: dict[int, torch.Tensor] = {}
        self.act_max: dict[int, torch.Tensor] = {}
        self.queries: dict[int, int] = {}
        self.rows = 0

    def add(self, store: dict, layer: int, value: torch.Tensor) -> None:
        store[layer] = store[layer] + value if layer in store else value


def _hooks(sums: _Sums) -> list:
    def pattern(w: torch.Tensor, point) -> None:
        n_q = w.shape[2]
        offset = point.n_keys - n_q if point.n_keys is not None else 0  # columns before the stream: a cached prefix
        rows = w[:, :, SETTINGS.min_query :].float()  # (B, H, t, width) queries after the stream's first token
        sums.add(sums.first, point.layer, rows[..., offset].sum((0, 2)))
        sums.add(sums.slot, point.layer, (1 - rows[..., offset:].sum(-1)).sum((0, 2)))
        sums.queries[point.layer] = sums.queries.get(point.layer, 0) + rows.shape[0] * rows.shape[2]

    def resid(h: torch.Tensor, point) -> None:
        sums.resid[point.layer] = max(sums.resid.get(point.layer, 0.0), float(h.detach().abs().amax()))

    def mlp(a: torch.Tensor, point) -> None:
        a = a.detach().abs().float()
        sums.add(sums.act_first, point.layer, a[:, 0].sum(0))
        sums.add(sums.act_rest, point.layer, a[:, 1:].mean(1).sum(0))
        sums.act_max[point.layer] = (
            torch.maximum(sums.act_max[point.layer], a.amax((0, 1))) if point.layer in sums.act_max else a.amax((0, 1))
        )

    return [
        (hook_name("*", "attn.hook_pattern"), pattern),
        (hook_name("*", "hook_resid_post"), resid),
        (hook_name("*", "mlp.hook_post"), mlp),
    ]


@torch.no_grad()
def sink_profile(
    hooks: HookSet,
    session: Callable[[], AbstractContextManager],
    run: Callable[[torch.Tensor], object],
    windows: torch.Tensor,
    down_weight: Callable[[int], Optional[torch.Tensor]],
    neurons: Optional[list[dict]] = None,
) -> dict:
    """Run ``run(window)`` on each window inside ``session()`` with the probe on ``hooks``; return
    the metrics. ``neurons``: super neurons to follow (found here when None)."""
    sums = _Sums()
    with session(), hooks.attached(_hooks(sums)):
        for window in windows:
            run(window[None])
            sums.rows += 1
    layers = sorted(sums.first)
    first = torch.stack([sums.first[i] / sums.queries[i] for i in layers])  # (L, H)
    slot = torch.stack([sums.slot[i] / sums.queries[i] for i in layers])
    if neurons is None:
        neurons = [
            n
            for i in sorted(sums.act_first)
            for n in super_neurons(
                sums.act_first[i] / sums.rows,
                sums.act_rest[i] / sums.rows,
                down_weight(i),
                i,
                SETTINGS.super_min_ratio,
                SETTINGS.super_min_activation,
            )
        ]
    return {
        "first_token_mass": float(first.mean()),
        "first_token_mass_by_layer": first.mean(-1).tolist(),
        "sink_rate": sink_rate(first, SETTINGS.eps),
        "slot_mass": float(slot.mean()),
        "slot_mass_by_layer": slot.mean(-1).tolist(),
        "max_abs_residual": max(sums.resid.values()),
        "max_abs_residual_by_layer": [sums.resid[i] for i in sorted(sums.resid)],
        "super_neurons": [_follow(n, sums) for n in neurons],
    }


def _follow(neuron: dict, sums: _Sums) -> dict:
    """A super neuron's mean |activation| at the stream's first position and its largest anywhere."""
    layer, n = neuron["layer"], neuron["neuron"]
    return {
        "layer": layer,
        "neuron": n,
        "act_first": float(sums.act_first[layer][n] / sums.rows),
        "act_max": float(sums.act_max[layer][n]),
    }


def profile_original(model: nn.Module, bos: int, windows: torch.Tensor) -> dict:
    """The original model reading BOS + each window."""
    hooks = HookSet()
    return sink_profile(
        hooks,
        lambda: instrument(model, hooks, query_chunk=None),
        lambda w: model.base_model(input_ids=prepend((bos,), w.to(model.device)), use_cache=False),
        windows,
        lambda i: down_proj_weight(model, i),
    )


def profile_adapted(adapted, windows: torch.Tensor, neurons: list[dict]) -> dict:
    """An :class:`~.adapted.AdaptedModel` reading each window (no BOS), following ``neurons``."""
    return sink_profile(
        adapted.hooks, adapted.applied, adapted.hidden, windows, lambda i: down_proj_weight(adapted.model, i), neurons
    )


@torch.no_grad()
def head_rms(model: nn.Module, bos: int, content: torch.Tensor) -> torch.Tensor:
    """(L, H) RMS of each head's output over BOS + ``content``: the scale a head-wise norm starts at."""
    hooks, rms = HookSet(), {}

    def keep(z: torch.Tensor, point) -> None:
        rms[point.layer] = z.float().pow(2).mean((0, 2, 3)).sqrt()

    with instrument(model, hooks, query_chunk=None), hooks.attached([(hook_name("*", "attn.hook_z"), keep)]):
        model.base_model(input_ids=prepend((bos,), content.to(model.device)), use_cache=False)
    return torch.stack([rms[i] for i in sorted(rms)])
