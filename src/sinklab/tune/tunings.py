"""The tunings a search returns, as values: what ``sinklab.applied(model, tuning)`` applies around
any forward, ``generate`` or lm-eval run (through :func:`tuning_edits`), saved and loaded as JSON.

Each method is a class of :mod:`.methods` (:class:`~.methods.ZeroTuning`, :class:`~.methods.ACT`,
and any registered there); a record names its method and holds its fields.
"""

from __future__ import annotations

import json
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterator, Optional

from ..core.atomic import write_json
from ..core.errors import SinklabError, check
from ..intervene import _hooked
from ..models.hf import QUERY_CHUNK
from .methods import TUNINGS, Tuning


@contextmanager
def _tuned(model, tuning: Tuning) -> Iterator[None]:
    """``sinklab.applied(model, tuning)`` for the tune runs (a capability cannot import the block):
    the tuning's edits through the interventions' hooks; nothing at all when it edits nothing."""
    edits, chunk = tuning_edits(model, tuning)
    with _hooked(model, edits, query_chunk=chunk) if edits else nullcontext():
        yield


def tuning_edits(model, tuning: Tuning) -> tuple[list, Optional[int]]:
    """The interventions ``tuning`` puts on ``model`` (a model it was not made for refused), and the
    query rows its forwards attend at a time (None: whole patterns, for a method that reads them)."""
    check(isinstance(tuning, Tuning), f"expected a tuning ({', '.join(TUNINGS)}), got {type(tuning).__name__}")
    layers = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    if layers is not None:
        tuning.check_depth(layers)
    return list(tuning.edits()), None if tuning.whole_rows else QUERY_CHUNK


def to_record(tuning: Tuning) -> dict:
    """The tuning as JSON-able values, with its method."""
    return {"method": tuning.method, **{k: _listed(v) for k, v in vars(tuning).items()}}  # a method's fields


def _listed(value):
    """Tuples (gammas by layer, heads as pairs) as the lists JSON reads back."""
    return [_listed(v) for v in value] if isinstance(value, tuple) else value


def from_record(record: dict) -> Tuning:
    """A tuning back from :func:`to_record`; anything else is a one-line error."""
    check(
        isinstance(record, dict) and record.get("method") in TUNINGS,
        f"not a sinklab tuning (method {' or '.join(TUNINGS)}): {str(record)[:80]}",
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
