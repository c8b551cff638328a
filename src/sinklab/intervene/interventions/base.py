"""What an intervention is, and the registry that makes one a flag of ``sinklab intervene``.

:class:`Intervention` is the base of every intervention: a frozen dataclass whose keyword-only
``layers`` / ``heads`` select where it acts and which turns into one hook per selected layer on
its hook ``point``. :func:`register` adds a subclass to :data:`INTERVENTIONS` (one flag each, in
the order the classes register) and to :data:`BY_TYPE` (what a configuration's record names);
``_OutputEdit`` is the shared base of the edits of token k's attention output (amplify, scale).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar, Optional, Sequence

import torch

from ...core.errors import check
from ...core.hooks import HookFn, HookSite, hook_name

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

    def edit(self, tensor: torch.Tensor, where: HookSite) -> torch.Tensor:  # pragma: no cover - interface
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

        def apply(tensor: torch.Tensor, where: HookSite) -> torch.Tensor:
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
