"""The tunings a search returns, as values: what :func:`.applied` applies around any forward,
``generate`` or lm-eval run, saved and loaded as JSON.

* :class:`ZeroTuning` (Han et al., ICLR 2026, arXiv 2505.11739): a gamma per (layer, head) on the
  initial token's attention weight; 1 leaves a head untouched.
* :class:`ACT` (Yu et al., ICML 2024, arXiv 2406.15765): the (layer, head) pairs whose later sinks
  are calibrated, with the paper's beta and threshold.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar, Union

from ..core.errors import SinklabError, check
from ..core.runs import write_json
from .edits import InitialTokenScale, SinkCalibration

#: ACT's defaults as the paper's code runs it (BETA=0.4, THRES=0.1).
ACT_BETA = 0.4
ACT_THRESHOLD = 0.1


@dataclass(frozen=True)
class ZeroTuning:
    """A gamma per (layer, head) on the initial token's attention (rows: layers)."""

    gammas: tuple[tuple[float, ...], ...]
    method: ClassVar[str] = "zerotuning"

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
