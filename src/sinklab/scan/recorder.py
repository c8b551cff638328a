"""Reduce while recording: hook probes that keep only what the metrics need.

A scan of T tokens never holds the (layers, heads, T, T) attention stack: each chunk of query
rows is reduced on arrival to the attention each key receives and the first-token column, and
the residual stream to per-position ratios, moments and the few massive entries. Memory is
O(layers x heads x T), plus O(layers x T x d) only when the variance curve is requested.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F

from ..core.hooks import HookSite, hook_name
from . import metrics


@dataclass
class RecordOptions:
    """What to keep besides the attention statistics (always kept)."""

    variance: bool = False  # per-position sums of the attention output, for the variance curve
    key_columns: tuple[int, ...] = (0,)  # keys whose weight from every query row is kept
    patterns: bool = False  # the mean (H, T, T) pattern per layer, for heatmaps of short inputs
    massive_absolute: float = 100.0
    massive_relative: float = 1000.0
    massive_limit: int = 100
    layers: Optional[tuple[int, ...]] = None  # the layers recorded (None: every layer); the others' statistics are NaN


@dataclass
class Record:
    """Reduced statistics of a run over ``sequences`` sequences of ``tokens`` positions.

    Per-layer tensors are stacked on a leading layer axis; attention statistics are averaged
    over the sequences.
    """

    sequences: int
    tokens: int
    columns: dict[int, torch.Tensor]  # key k -> (L, H, T): mean A[i, k] per query i
    received: torch.Tensor  # (L, H, T): mean over sequences of sum_i A[i, k] per key k
    received_by_sequence: Optional[torch.Tensor]  # (L, N, T): sum_i A[i, k] per sequence, mean over heads
    own: torch.Tensor  # (L, H, T): mean over sequences of A[k, k], each key's weight in its own row
    row_mass: torch.Tensor  # (L, H): mean over sequences and query rows of sum_k A[i, k]
    key_norm: torch.Tensor  # (L, T): mean over sequences and heads of ||k_t||
    value_norm: torch.Tensor  # (L, T)
    dominance: torch.Tensor  # (L, T): mean dominance ratio of the residual stream per position
    resid_norm: torch.Tensor  # (L, T): mean over sequences of ||h_t|| of the residual stream
    median_abs: torch.Tensor  # (L,): mean over sequences of the median |h| of the residual stream
    max_abs: torch.Tensor  # (L, T): largest |h| over dimensions and sequences per position
    kurtosis: torch.Tensor  # (L,)
    massive: list[dict]  # one entry per (layer, position, dim) over the threshold, by layer
    act_first: Optional[torch.Tensor] = None  # (L, I): mean |a| of FFN neurons at position 0
    act_rest: Optional[torch.Tensor] = None  # (L, I): mean |a| at positions >= 1
    variance: Optional[torch.Tensor] = None  # (L, T)
    patterns: Optional[torch.Tensor] = None  # (L, H, T, T)
    zero_share: Optional[torch.Tensor] = None  # (L, H): share of the visible weights that are exactly 0
    extra: dict = field(default_factory=dict)

    @property
    def first_column(self) -> torch.Tensor:
        """(L, H, T): mean attention each query row puts on position 0."""
        return self.columns[0]

    @property
    def alpha(self) -> torch.Tensor:
        """Gu et al. sink scores alpha_k for every (layer, head, key position), (L, H, T)."""
        return metrics.sink_scores(self.received, self.own)


class Recorder:
    """Probes for every hook point that reduce each event into running statistics."""

    def __init__(self, n_layers: int, options: Optional[RecordOptions] = None) -> None:
        self.n_layers = n_layers
        self.options = options or RecordOptions()
        self.layers = tuple(range(n_layers)) if self.options.layers is None else tuple(sorted(set(self.options.layers)))
        self.sequences = 0
        self._sums: dict[str, dict[int, torch.Tensor]] = defaultdict(dict)
        self._by_sequence: dict[int, dict[int, torch.Tensor]] = {}  # layer -> first sequence of a pass -> (B, T)
        self._moments = [metrics.Moments() for _ in range(n_layers)]
        self._massive: dict[tuple[int, int, int], dict] = {}
        self._masks: dict[int, torch.Tensor] = {}  # layer -> the mask of the block of rows attending now

    def hooks(self):
        """(pattern, fn) pairs to attach to a model's :class:`~sinklab.core.hooks.HookSet`."""
        probes = [
            ("attn.hook_mask", self._on_mask),
            ("attn.hook_pattern", self._on_pattern),
            ("attn.hook_k", self._on_key),
            ("attn.hook_v", self._on_value),
            ("hook_resid_post", self._on_resid),
            ("mlp.hook_post", self._on_mlp),
        ]
        if self.options.variance:
            probes.append(("attn.hook_z", self._on_z))
        where = ("*",) if self.options.layers is None else self.layers
        return [(hook_name(layer, point), fn) for point, fn in probes for layer in where]

    def reserve(self, n_heads: int, positions: int, devices=None) -> None:
        """Allocate the running sums that live as long as the scan before the first forward pass.

        Allocated lazily, mid-pass, these small long-lived tensors land inside the large blocks
        the pass frees and split them, and the heap fragments: on the default model at 2,048
        tokens glibc's mallinfo2 showed ~300 MB freed but unusable after every layer, ~60 MB with
        the sums reserved. ``devices``: one device for every layer, or a list with each layer's
        (a model spread by a device map sums each layer's statistics where the layer runs)."""
        per_key = ["received", "own", *(f"column{k}" for k in self.options.key_columns if k < positions)]
        for layer in self.layers:
            device = devices[layer] if isinstance(devices, (list, tuple)) else devices
            shapes = {
                **{key: (n_heads, positions) for key in per_key},
                **{key: (positions,) for key in ("key_norm", "value_norm", "dominance", "resid_norm", "max_abs")},
                "median_abs": (),
            }
            for key, shape in shapes.items():
                self._sums[key].setdefault(layer, torch.zeros(shape, dtype=torch.float64, device=device))

    def count(self, sequences: int) -> None:
        """Declare that a forward pass over ``sequences`` more sequences is about to run."""
        self.sequences += sequences

    # -- probes: each returns None, so recording never changes the model ------------------
    # Scans run without a KV cache, so query row i is position i and a chunk of rows starting
    # at point.q_start covers positions q_start .. q_start + t - 1.

    def _accumulate(self, key: str, layer: int, value: torch.Tensor) -> None:
        store = self._sums[key]
        if layer in store:
            store[layer] += value.detach()  # in place: no new long-lived tensor mid-pass
        else:
            store[layer] = value.detach().double()

    def _accumulate_span(self, key: str, layer: int, value: torch.Tensor, start: int, size: int) -> None:
        """Add ``value`` (..., n) into entries start..start+n of a (..., size) running sum."""
        store = self._sums[key]
        if layer not in store:
            store[layer] = torch.zeros(*value.shape[:-1], size, dtype=torch.float64, device=value.device)
        store[layer][..., start : start + value.shape[-1]] += value.detach().double()

    def _on_mask(self, mask: torch.Tensor, point: HookSite) -> None:
        self._masks[point.layer] = mask  # fired just before the same rows' pattern

    def _on_pattern(self, w: torch.Tensor, point: HookSite) -> None:
        # A chunk's weights may stop before the last key (keys no row of it can see): column j
        # is key j, and point.n_keys is the full count (= the number of query positions here).
        T = point.n_keys or w.shape[-1]
        self._accumulate_span("received", point.layer, w.sum(dim=(0, 2)), 0, T)  # (H, T)
        self._accumulate_by_sequence(point.layer, w.mean(1).sum(1), T)  # (B, keys)
        own = torch.diagonal(w, offset=point.q_start, dim1=-2, dim2=-1)  # (B, H, t): row q_start + r on key q_start + r
        self._accumulate_span("own", point.layer, own.sum(0), point.q_start, T)
        for key in self.options.key_columns:
            if key < w.shape[-1]:
                self._accumulate_span(f"column{key}", point.layer, w[..., key].sum(0), point.q_start, T)  # (H, t)
        mask = self._masks.pop(point.layer, None)
        if mask is not None:
            visible = mask[..., : w.shape[-1]].expand_as(w)  # the keys each row may see
            self._accumulate("zero_weights", point.layer, ((w == 0) & visible).sum(dim=(0, 2, 3)))  # (H,)
            self._accumulate("visible_weights", point.layer, visible.sum(dim=(0, 2, 3)))  # (H,)
        if self.options.patterns:
            rows = F.pad(w, (0, T - w.shape[-1])).sum(0).permute(0, 2, 1)  # (H, T, t): keys x query rows, rows last
            self._accumulate_span("patterns", point.layer, rows, point.q_start, T)

    def _accumulate_by_sequence(self, layer: int, value: torch.Tensor, size: int) -> None:
        """Add ``value`` (B, n), the pass's sequences (the last B counted), into their (B, size)
        block: each sequence's own received mass, for criteria applied input by input."""
        blocks = self._by_sequence.setdefault(layer, {})
        first = self.sequences - value.shape[0]
        if first not in blocks:
            blocks[first] = torch.zeros(value.shape[0], size, dtype=torch.float64, device=value.device)
        blocks[first][:, : value.shape[-1]] += value.detach().double()

    def _on_key(self, k: torch.Tensor, point: HookSite) -> None:
        self._accumulate("key_norm", point.layer, k.float().norm(dim=-1).mean(1).sum(0))  # (T,)

    def _on_value(self, v: torch.Tensor, point: HookSite) -> None:
        self._accumulate("value_norm", point.layer, v.float().norm(dim=-1).mean(1).sum(0))

    def _on_z(self, z: torch.Tensor, point: HookSite) -> None:
        flat = z.transpose(1, 2).reshape(z.shape[0], z.shape[2], -1).double()  # (B, T, H * D)
        self._accumulate("z_sum", point.layer, flat.sum(0))
        self._accumulate("z_sq", point.layer, flat.pow(2).sum(0))

    def _on_resid(self, h: torch.Tensor, point: HookSite) -> None:
        self._accumulate("dominance", point.layer, metrics.dominance_ratio(h).sum(0))  # (T,)
        self._accumulate("resid_norm", point.layer, h.detach().float().norm(dim=-1).sum(0))  # (T,)
        magnitude = h.detach().abs()
        medians = torch.stack([row.median() for row in magnitude.flatten(1)])  # (B,); median(dim=1) is 1.7x slower
        self._accumulate("median_abs", point.layer, medians.sum())  # ()
        peak = magnitude.amax(dim=(0, 2)).double()  # (T,)
        store = self._sums["max_abs"]
        if point.layer in store:
            torch.maximum(store[point.layer], peak, out=store[point.layer])
        else:
            store[point.layer] = peak
        self._moments[point.layer].add(h)
        o = self.options
        median_all = medians[0].item() if len(medians) == 1 else None  # one sequence: its median is the batch's
        for hit in metrics.massive_activations(
            h, point.layer, o.massive_absolute, o.massive_relative, o.massive_limit, median_all
        ):
            self._merge_massive(hit)

    def _merge_massive(self, hit: dict) -> None:
        """Keep one entry per (layer, position, dim): its largest |value| and in how many sequences."""
        key = (hit["layer"], hit["position"], hit["dim"])
        seen = self._massive.get(key)
        if seen is None:
            self._massive[key] = {"layer": key[0], "position": key[1], "dim": key[2], "value": hit["value"], "sequences": 1}
            return
        seen["sequences"] += 1
        if abs(hit["value"]) > abs(seen["value"]):
            seen["value"] = hit["value"]

    def _on_mlp(self, a: torch.Tensor, point: HookSite) -> None:
        a = a.detach().abs().float()  # sums over a bfloat16 batch and sequence would round at every step
        self._accumulate("act_first", point.layer, a[:, 0].sum(0))  # (I,)
        if a.shape[1] > 1:
            self._accumulate("act_rest", point.layer, a[:, 1:].mean(1).sum(0))

    # -- result -----------------------------------------------------------------------------

    def result(self) -> Record:
        """The averaged statistics of everything recorded so far."""
        n = self.sequences
        if n == 0 or "received" not in self._sums:
            raise RuntimeError("nothing was recorded: run the model inside the recorder's hooks and call count()")
        mean = lambda key: self._stack(key, n)  # noqa: E731
        variance = None
        if self.options.variance and n >= 2:
            variance = self._by_layer(
                {i: metrics.variance_by_position(self._sums["z_sum"][i], self._sums["z_sq"][i], n) for i in self.layers}
            )
        patterns, received = mean("patterns"), mean("received")
        return Record(
            sequences=n,
            tokens=self._sums["received"][self.layers[0]].shape[-1],
            columns={k: mean(f"column{k}") for k in self.options.key_columns if f"column{k}" in self._sums},
            received=received,
            received_by_sequence=self._by_layer(
                {layer: torch.cat([blocks[i].cpu() for i in sorted(blocks)]) for layer, blocks in self._by_sequence.items()}
            )
            if self._by_sequence
            else None,
            own=mean("own"),
            row_mass=received.sum(-1) / received.shape[-1],  # all rows' mass, summed key by key
            key_norm=mean("key_norm"),
            value_norm=mean("value_norm"),
            dominance=mean("dominance"),
            resid_norm=mean("resid_norm"),
            median_abs=mean("median_abs"),
            max_abs=self._by_layer(self._sums["max_abs"]),
            kurtosis=torch.tensor([m.kurtosis() for m in self._moments], dtype=torch.float64),  # NaN for a layer not recorded
            massive=sorted(self._massive.values(), key=lambda e: (e["layer"], -abs(e["value"]))),
            act_first=mean("act_first"),
            act_rest=mean("act_rest"),
            variance=variance,
            patterns=patterns.transpose(-1, -2) if patterns is not None else None,  # (L, H, T, T)
            zero_share=self._zero_share(),
        )

    def _zero_share(self) -> Optional[torch.Tensor]:
        zeros, visible = self._stack("zero_weights", 1), self._stack("visible_weights", 1)
        return None if zeros is None or visible is None else zeros / visible

    def _stack(self, key: str, n: int) -> Optional[torch.Tensor]:
        store = self._sums.get(key)
        return self._by_layer(store) / n if store else None

    def _by_layer(self, per_layer: dict[int, torch.Tensor]) -> torch.Tensor:
        """(L, ...) from one tensor per recorded layer (they stay on each layer's device until here);
        a layer not recorded is NaN."""
        like = per_layer[self.layers[0]]
        return torch.stack(
            [
                per_layer[i].cpu() if i in per_layer else torch.full(like.shape, float("nan"), dtype=like.dtype)
                for i in range(self.n_layers)
            ]
        )
