"""Causal edits of attention: create, move and remove sinks (Li et al. 2026; Xiao et al. 2024).

Each intervention is a frozen dataclass that turns into hooks on the named hook points, so the
same value edits a Hugging Face model, a native LM or a trigger-lab model. Hooks only exist
inside :meth:`~sinklab.core.hooks.HookSet.attached` (used by the runner), and every intervention
is recorded in the run's config through its dataclass fields.

A new intervention is one class here: a frozen dataclass with ``point``, ``edit`` and ``label``,
decorated with ``@register(option, takes=..., help=...)`` and saying in ``for_option`` which
interventions its command-line option asks for. ``sinklab intervene --option`` (from ``help`` and
``takes``), the runner and the report pick it up from :data:`INTERVENTIONS`. The notebook and the
configuration take the values themselves (``intervene_model(model, tok, [MaskSelf(10)])``, as
:func:`sinklab.applied` does); only the command line speaks in options.

``layers`` / ``heads`` select where an intervention acts (None: everywhere) and are keyword-only;
the fields of each intervention come first and may be positional (``MaskSelf(10)``,
``VarianceAmplify(5, 4.0)``, ``ScoreBias((0,), -inf, layers=(2,))``). Positions are 0-indexed
absolute token positions of the input (position 0 is the BOS token when one is prepended); with a
KV cache an edit at position k acts in the step that computes position k.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar, Optional, Sequence

import torch

from ..core.errors import SinklabError, check
from ..core.hooks import HookFn, HookPoint, hook_name

MU_DEFINITION = "mean over positions 0..T-1 of the same layer's per-head attention output in the same sequence"

#: What an option takes on the command line: K[,K...], one K, a count N, or nothing.
TAKES = ("positions", "position", "count", "switch")

#: option name (``mask_self`` -> ``--mask-self``) -> intervention class, in the order runs are made.
INTERVENTIONS: dict[str, type["Intervention"]] = {}
#: class name -> class: what a recorded intervention's ``type`` names (ScoreBias too, which suppress_sink makes).
BY_TYPE: dict[str, type["Intervention"]] = {}


def register(
    option: str, takes: str, help: str, sweeps_lam: bool = False
) -> Callable[[type["Intervention"]], type["Intervention"]]:
    """Class decorator: make an intervention available as ``--option`` of ``sinklab intervene``."""
    if takes not in TAKES:
        raise ValueError(f"takes must be one of {TAKES}, got {takes!r}")

    def add(cls: type["Intervention"]) -> type["Intervention"]:
        if option in INTERVENTIONS:
            raise ValueError(f"intervention option {option!r} is registered twice")
        cls.option, cls.takes, cls.help, cls.sweeps_lam = option, takes, help, sweeps_lam
        INTERVENTIONS[option] = cls
        BY_TYPE[cls.__name__] = cls
        return cls

    return add


@dataclass(frozen=True)
class Intervention:
    layers: Optional[tuple[int, ...]] = field(default=None, kw_only=True)
    heads: Optional[tuple[int, ...]] = field(default=None, kw_only=True)

    point: ClassVar[str] = ""  # the hook point the edit acts on
    option: ClassVar[str] = ""
    takes: ClassVar[str] = ""
    help: ClassVar[str] = ""
    sweeps_lam: ClassVar[bool] = False

    @classmethod
    def for_option(cls, value: Any, lams: Sequence[float], where: dict) -> list["Intervention"]:  # pragma: no cover - interface
        """The interventions (one run each) that ``--option value`` asks for; ``where`` holds
        ``layers`` and ``heads``."""
        raise NotImplementedError

    @property
    def label(self) -> str:  # pragma: no cover - interface
        """How reports and tables name this intervention."""
        raise NotImplementedError

    @property
    def reported_position(self) -> int:
        """The position k whose share of attention a run reports for this intervention."""
        return self.positions()[0]

    def edit(self, tensor: torch.Tensor, where: HookPoint) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def positions(self) -> tuple[int, ...]:
        """Token positions the intervention names (validated against the input length)."""
        return ()

    @property
    def strength(self) -> Optional[float]:
        """The swept parameter (lam) where there is one."""
        return None

    def describe(self) -> dict:
        return {"type": type(self).__name__, **asdict(self)}

    def to_record(self) -> dict:
        """How a configuration records it (config.json): its type and fields."""
        return self.describe()

    @staticmethod
    def from_record(record: dict) -> "Intervention":
        """The intervention a configuration recorded (:meth:`to_record`)."""
        check(
            isinstance(record, dict) and record.get("type") in BY_TYPE,
            f"not an intervention: {record!r} "
            "(give objects such as MaskSelf(10), as applied() takes; command-line options: interventions_for(options))",
        )
        cls = BY_TYPE[record["type"]]
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in record.items() if k != "type"}
        return cls(**values)

    def validate(self, n_layers: int, n_heads: int, n_tokens: Optional[int]) -> None:
        """Layers and heads against the model; positions against the input (None: not known yet)."""
        for layer in self.layers or ():
            check(0 <= layer < n_layers, f"{type(self).__name__}: layer {layer} does not exist (the model has {n_layers} layers)")
        for head in self.heads or ():
            check(0 <= head < n_heads, f"{type(self).__name__}: head {head} does not exist (the model has {n_heads} heads)")
        for pos in self.positions() if n_tokens is not None else ():
            check(0 <= pos < n_tokens, f"{type(self).__name__}: position {pos} is beyond the input ({n_tokens} tokens)")

    def hooks(self, n_heads: int) -> list[tuple[str, HookFn]]:
        """One hook per selected layer (a glob over all layers when none are selected)."""
        layers = self.layers if self.layers is not None else ("*",)

        def apply(tensor: torch.Tensor, where: HookPoint) -> torch.Tensor:
            edited = self.edit(tensor, where)
            return edited if self.heads is None else self._on_selected_heads(tensor, edited, n_heads)

        return [(hook_name(layer, self.point), apply) for layer in layers]

    def _on_selected_heads(self, original: torch.Tensor, edited: torch.Tensor, n_heads: int) -> torch.Tensor:
        """``edited`` on the selected heads, ``original`` on the others (dim 1 indexes heads;
        masks arrive with a head dimension of 1 and are expanded)."""
        shape = (max(original.shape[0], edited.shape[0]), n_heads, *original.shape[2:])
        selected = torch.zeros(n_heads, dtype=torch.bool, device=original.device)
        selected[list(self.heads)] = True
        return torch.where(selected.view(1, -1, 1, 1), edited.expand(shape), original.expand(shape))


@register("mask_self", takes="positions", help="token k attends only to itself")
@dataclass(frozen=True)
class MaskSelf(Intervention):
    """Token k attends only to itself: its mask row keeps only the diagonal (Li et al. 2026).

    Token 0 sees nothing but itself, so its attention output is an unaveraged value vector; doing
    the same to token k gives it position 0's high-variance output, which should make it a sink.
    """

    k: int
    point: ClassVar[str] = "attn.hook_mask"

    @classmethod
    def for_option(cls, value, lams, where):
        return [cls(k=k, **where) for k in value]

    @property
    def label(self):
        return f"mask_self k={self.k}"

    def positions(self):
        return (self.k,)

    def edit(self, mask, where):
        row = self.k - where.q_start
        if not 0 <= row < mask.shape[-2]:
            return mask
        edited = mask.clone()
        edited[..., row, :] = False
        edited[..., row, self.k] = True
        return edited


@dataclass(frozen=True)
class _OutputEdit(Intervention):
    """Rewrites token k's per-head attention output (after value aggregation, before the output
    projection) with strength ``lam``; subclasses say how in :meth:`rewrite`."""

    k: int
    lam: float
    point: ClassVar[str] = "attn.hook_z"

    @classmethod
    def for_option(cls, value, lams, where):
        return [cls(k=value, lam=lam, **where) for lam in lams]

    @property
    def label(self):
        return f"{self.option} k={self.k} lam={self.lam:g}"

    def positions(self):
        return (self.k,)

    @property
    def strength(self):
        return self.lam

    def rewrite(self, o_k: torch.Tensor, z: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def edit(self, z, where):
        row = self.k - where.q_start
        if not 0 <= row < z.shape[2]:
            return z
        edited = z.clone()
        edited[:, :, row] = self.rewrite(z[:, :, row], z)
        return edited


@register(
    "amplify", takes="position", help="mean-centred amplification of token k's attention output over --lam", sweeps_lam=True
)
@dataclass(frozen=True)
class VarianceAmplify(_OutputEdit):
    """Mean-centred amplification of token k's attention output: o'_k = mu + lam (o_k - mu).

    ``mu`` is :data:`MU_DEFINITION` (Li et al. 2026). It raises o_k's deviation from the typical
    output, i.e. the variance that makes position 0 a sink, by lam. ``mu`` needs every position
    from 0 in one forward: under a KV cache k must be in the prompt (mu is then over the prompt),
    and a decoding step that computes k is refused rather than edited with a one-row mean.
    """

    def edit(self, z, where):
        if where.q_start > 0 and self.k >= where.q_start:
            raise SinklabError(
                f"VarianceAmplify at position {self.k} needs the attention outputs of positions 0..T-1 (its mean mu), "
                f"but this forward computes only positions from {where.q_start} (a KV cache); amplify a position of the prompt"
            )
        return super().edit(z, where)

    def rewrite(self, o_k, z):
        mu = z.mean(dim=2)  # (B, H, D): the layer's mean head output over positions
        return mu + self.lam * (o_k - mu)


@register("scale", takes="position", help="plain scaling of token k's attention output over --lam (the control)", sweeps_lam=True)
@dataclass(frozen=True)
class PlainScale(_OutputEdit):
    """o'_k = lam * o_k: the control that raises the norm of token k's output but not in the
    mean-centred way (Li et al. 2026 find it does not create a sink)."""

    def rewrite(self, o_k, z):
        return self.lam * o_k


@register("suppress_sink", takes="switch", help="score bias -inf on position 0 in every layer")
@dataclass(frozen=True)
class ScoreBias(Intervention):
    """Add ``delta`` to the pre-normalisation scores of the keys at ``at`` (delta = -inf removes them).

    Applies to queries after each key: a token's score on itself is left alone, so removing
    position 0 never leaves query 0 with nothing to attend to.
    """

    at: tuple[int, ...]
    delta: float
    point: ClassVar[str] = "attn.hook_scores"

    @classmethod
    def for_option(cls, value, lams, where):
        return [suppress_sink(0, **where)]

    @property
    def label(self):
        at = ",".join(str(p) for p in self.at)
        return (
            "suppress_sink (score bias -inf at 0)"
            if self.delta == float("-inf") and self.at == (0,)
            else f"score_bias {self.delta:g} at {at}"
        )

    def positions(self):
        return tuple(self.at)

    def edit(self, scores, where):
        t, n_keys = scores.shape[-2], scores.shape[-1]
        queries = torch.arange(where.q_start, where.q_start + t, device=scores.device).view(-1, 1)
        keys = torch.zeros(n_keys, dtype=torch.bool, device=scores.device)
        keys[[p for p in self.at if p < n_keys]] = True
        hit = keys.view(1, -1) & (queries > torch.arange(n_keys, device=scores.device).view(1, -1))  # (t, Tk)
        return torch.where(hit, scores + self.delta, scores)


@register("value_zero", takes="positions", help="zero the value vectors at these positions")
@dataclass(frozen=True)
class ValueZero(Intervention):
    """Zero the value vectors of the given positions (tests the "no-op sink" account: a sink
    whose value is already near zero loses nothing)."""

    at: tuple[int, ...]
    point: ClassVar[str] = "attn.hook_v"

    @classmethod
    def for_option(cls, value, lams, where):
        return [cls(at=tuple(value), **where)]

    @property
    def label(self):
        return f"value_zero {list(self.at)}"

    def positions(self):
        return tuple(self.at)

    def edit(self, v, where):
        edited = v.clone()
        edited[:, :, [p for p in self.at if p < v.shape[2]]] = 0.0
        return edited


@register("drop_first", takes="count", help="evict the first N tokens from attention (StreamingLLM ablation)")
@dataclass(frozen=True)
class DropFirst(Intervention):
    """Evict the first ``n`` tokens from attention for every later query (the StreamingLLM
    window-attention ablation, Xiao et al. 2024). The first n tokens still see each other."""

    n: int
    point: ClassVar[str] = "attn.hook_mask"

    @classmethod
    def for_option(cls, value, lams, where):
        check(value >= 1, f"--drop-first must be at least 1, got {value}")
        return [cls(n=value, **where)]

    @property
    def label(self):
        return f"drop_first n={self.n}"

    @property
    def reported_position(self):
        return 0  # the sink the eviction removes

    def positions(self):
        return (self.n - 1,) if self.n > 0 else ()

    def edit(self, mask, where):
        t = mask.shape[-2]
        queries = torch.arange(where.q_start, where.q_start + t, device=mask.device).view(-1, 1)
        evicted = (queries >= self.n) & (torch.arange(mask.shape[-1], device=mask.device).view(1, -1) < self.n)
        return mask & ~evicted


def suppress_sink(position: int = 0, **where) -> ScoreBias:
    """ScoreBias(-inf) at ``position`` in every layer: the first-token sink removed."""
    return ScoreBias(at=(position,), delta=float("-inf"), **where)
