"""The tunings a search returns, as values: what ``sinklab.applied(model, tuning)`` applies around
any forward, ``generate`` or lm-eval run (through :func:`tuning_edits`), saved and loaded as JSON.

* :class:`ZeroTuning` (Han et al., ICLR 2026, arXiv 2505.11739): a gamma per (layer, head) on the
  initial token's attention weight; 1 leaves a head untouched.
* :class:`ACT` (Yu et al., ICML 2024, arXiv 2406.15765): the (layer, head) pairs whose later sinks
  are calibrated, with the paper's beta and threshold.
"""

from __future__ import annotations

import json
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar, Iterator, Optional, Union

from ..core.errors import SinklabError, check
from ..core.runs import write_json
from ..intervene import _hooked
from ..models.hf import QUERY_CHUNK
from .edits import InitialTokenScale, SinkCalibration

#: ACT's defaults as the paper's code runs it (BETA=0.4, THRES=0.1).
ACT_BETA = 0.4
ACT_THRESHOLD = 0.1


@dataclass(frozen=True)
class ZeroTuning:
    """A gamma per (layer, head) on the initial token's attention (rows: layers)."""

    gammas: tuple[tuple[float, ...], ...]
    method: ClassVar[str] = "zerotuning"
    #: Whether its edits read each head's whole attention pattern (every query row at once).
    whole_rows: ClassVar[bool] = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "gammas", tuple(tuple(float(g) for g in row) for row in self.gammas))
        check(len({len(row) for row in self.gammas}) <= 1, "ZeroTuning: every layer needs the same number of gammas")
        for row in self.gammas:
            InitialTokenScale(row)  # refuses a gamma that is not a positive finite number

    @classmethod
    def identity(cls, layers: int, heads: int) -> "ZeroTuning":
        return cls(tuple((1.0,) * heads for _ in range(layers)))

    @property
    def scaled(self) -> int:
        """How many heads have a gamma other than 1."""
        return sum(g != 1.0 for row in self.gammas for g in row)

    def check_depth(self, layers: int) -> None:
        """Refuse a model of another depth than the one the gammas were chosen for."""
        check(len(self.gammas) == layers, f"this ZeroTuning has gammas for {len(self.gammas)} layers; the model has {layers}")

    def edits(self) -> list:
        return [InitialTokenScale(row, layers=(layer,)) for layer, row in enumerate(self.gammas) if any(g != 1.0 for g in row)]


@dataclass(frozen=True)
class ACT:
    """The (layer, head) pairs whose sinks after the first token are calibrated."""

    heads: tuple[tuple[int, int], ...]
    beta: float = ACT_BETA
    threshold: float = ACT_THRESHOLD
    spare: str = "first_token"  # which sink is kept (formulas.SPARE_RULES); older tunings kept the first token
    method: ClassVar[str] = "act"
    whole_rows: ClassVar[bool] = True  # a head's sinks are read from its whole pattern

    def check_depth(self, layers: int) -> None:
        """The heads' layers are checked against the model when the block's edits are."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", tuple(sorted((int(layer), int(head)) for layer, head in self.heads)))
        SinkCalibration(beta=self.beta, threshold=self.threshold, spare=self.spare)  # refuses what is out of range

    @property
    def scaled(self) -> int:
        return len(self.heads)

    def edits(self) -> list:
        by_layer: dict[int, list[int]] = {}
        for layer, head in self.heads:
            by_layer.setdefault(layer, []).append(head)
        return [
            SinkCalibration(beta=self.beta, threshold=self.threshold, spare=self.spare, layers=(layer,), heads=tuple(heads))
            for layer, heads in sorted(by_layer.items())
        ]


Tuning = Union[ZeroTuning, ACT]
TUNINGS = {cls.method: cls for cls in (ZeroTuning, ACT)}


@contextmanager
def _tuned(model, tuning: Tuning) -> Iterator[None]:
    """``sinklab.applied(model, tuning)`` for the tune runs (a capability cannot import the block):
    the tuning's edits through the interventions' hooks; nothing at all when it edits nothing."""
    edits, chunk = tuning_edits(model, tuning)
    with _hooked(model, edits, query_chunk=chunk) if edits else nullcontext():
        yield


def tuning_edits(model, tuning: Tuning) -> tuple[list, Optional[int]]:
    """The interventions ``tuning`` puts on ``model`` (a model of another depth refused), and the
    query rows its forwards attend at a time (None: whole patterns, for a method that reads them)."""
    check(isinstance(tuning, tuple(TUNINGS.values())), f"expected a ZeroTuning or an ACT tuning, got {type(tuning).__name__}")
    layers = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    if layers is not None:
        tuning.check_depth(layers)
    return list(tuning.edits()), None if tuning.whole_rows else QUERY_CHUNK


def untouched(method: str, layers: int, heads: int) -> Tuning:
    """``method``'s tuning that edits nothing (every gamma 1; no head calibrated)."""
    return ZeroTuning.identity(layers, heads) if method == ZeroTuning.method else ACT(())


def to_record(tuning: Tuning) -> dict:
    """The tuning as JSON-able values, with its method."""
    return {
        "method": tuning.method,
        **{k: [list(v) for v in vs] if k in ("gammas", "heads") else vs for k, vs in asdict(tuning).items()},
    }


def from_record(record: dict) -> Tuning:
    """A tuning back from :func:`to_record`; anything else is a one-line error."""
    check(
        isinstance(record, dict) and record.get("method") in TUNINGS,
        f"not a sinklab tuning (method zerotuning or act): {str(record)[:80]}",
    )
    fields = {k: v for k, v in record.items() if k != "method"}
    try:
        return TUNINGS[record["method"]](**fields)
    except (TypeError, ValueError) as exc:
        raise SinklabError(f"not a valid {record['method']} tuning: {exc}") from None


def save_tuning(tuning: Tuning, path: str | Path) -> Path:
    """Write ``tuning`` as JSON (atomically)."""
    return write_json(path, to_record(tuning))


def load_tuning(path: str | Path) -> Tuning:
    """A tuning saved by :func:`save_tuning`, such as each task's ``tuning-<task>.json`` in a
    ``sinklab tune`` run directory (a task name's ``/`` written as ``__``)."""
    path = Path(path)
    check(path.is_file(), f"no tuning file at {path}")
    try:
        return from_record(json.loads(path.read_text()))
    except json.JSONDecodeError as exc:
        raise SinklabError(f"{path} is not JSON: {exc}") from None
