"""How sinklab records a value in JSON (run.json, config.json, summaries, data files): one
conversion, so every file spells a dtype, a tensor or a missing number alike. Kept apart from
:mod:`.atomic`, which writes the files, as the one function both run directories and results read."""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any


def jsonable(obj: Any) -> Any:
    """Convert dataclasses, tensors, paths and dtypes into plain JSON values; a non-finite float
    becomes None (JSON's null: a reader needs no special case for "inf" or "nan" strings)."""
    if hasattr(obj, "to_record"):  # a value that says how it is recorded (an intervention: its type too)
        return jsonable(obj.to_record())
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):  # torch tensors and numpy arrays
        return jsonable(obj.tolist())
    if hasattr(obj, "item"):  # numpy scalars
        return jsonable(obj.item())
    if type(obj).__module__ == "torch" and type(obj).__name__ in ("dtype", "device"):
        return str(obj).removeprefix("torch.")
    return obj
