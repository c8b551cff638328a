"""Run directories and atomic file writes.

Every result file is written to a temporary file in the same directory and then renamed over
the target, so a killed run never leaves a half-written file that looks complete.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, Iterator

from .errors import SinklabError


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it over ``path`` if the block succeeds."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes files private; results follow the umask
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder next to ``path``; rename it to ``path`` if the block succeeds.

    If ``path`` appeared meanwhile (another process finished the same work first), that one is
    kept and the temporary folder dropped.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        yield tmp
        if not target.exists():
            os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def jsonable(obj: Any) -> Any:
    """Convert dataclasses, tensors, paths and dtypes into plain JSON values; a non-finite float
    becomes None (JSON's null: a reader needs no special case for "inf" or "nan" strings)."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return jsonable(asdict(obj))
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


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Atomically write ``obj`` as indented JSON (NaN/inf become null, never invalid JSON)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(jsonable(obj), indent=2) + "\n")
    return Path(path)


def append_jsonl(path: str | os.PathLike, obj: Any) -> None:
    """Append one JSON line; a torn last line from a kill is skipped by :func:`read_jsonl`."""
    with open(path, "a") as fh:
        fh.write(json.dumps(jsonable(obj)) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def write_jsonl(path: str | os.PathLike, rows: list) -> None:
    """Atomically replace a JSON-lines file with ``rows``."""
    with atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps(jsonable(r)) + "\n" for r in rows))


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read a JSON-lines file. A torn last line (a write cut short by a kill, see
    :func:`append_jsonl`) is skipped with a warning; a malformed line anywhere else is an error."""
    lines = Path(path).read_text().splitlines()
    rows = []
    for number, line in enumerate(lines, start=1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):
                raise SinklabError(f"{path}, line {number}, is not valid JSON; the file is damaged") from None
            warnings.warn(f"skipped the torn last line of {path} (an interrupted write)", stacklevel=2)
    return rows


def prepare_run_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` (and parents), check that it is writable (a clear error if not), and record
    in ``run.json`` the command line and package versions the run's report shows."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-", delete=True)
        probe.close()
    except OSError as exc:
        raise SinklabError(f"output directory {out} is not writable: {exc.strerror or exc}") from None
    write_json(out / "run.json", {"command": ["sinklab", *sys.argv[1:]] if _from_cli() else sys.argv, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "versions": package_versions()})
    return out


class PhaseClock:
    """Wall time of a run's named phases (what a user waits for), kept for its summary."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(time.perf_counter() - start, 3)


def _from_cli() -> bool:
    """Whether this process is the ``sinklab`` command (the script or ``python -m sinklab``)."""
    entry = Path(sys.argv[0])
    return entry.name == "sinklab" or (entry.name == "__main__.py" and entry.parent.name == "sinklab")


def package_versions() -> dict:
    """Versions of the packages a result depends on (those installed)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for name in ("sinklab", "torch", "transformers", "plotly"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def machine_info() -> dict:
    """The machine and library versions, recorded next to every measured number."""
    import torch

    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    return info
