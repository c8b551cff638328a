"""What every run returns in memory, and the registry of what each kind of run is.

A :class:`RunResult` holds a run's summary (exactly what its ``summary.json`` holds), its data
(the tensors and tables a user may want beyond the summary, e.g. a scan's (L, H, T) record or a
stream's NLL curves: what the run directory's data files hold) and, when one was written, its
run directory. ``frame()`` is its summary as a tidy pandas table (one observation per row, with
the model, its dtype and its device in every row, so frames of several runs concatenate);
``figures()`` and ``page()`` draw it, from memory.

A :class:`Capability` says what a kind of run is: its config, how it measures, writes and checks,
its tables, plots and how its data is read back. Each capability registers one
(:func:`register`), so :func:`load_result` can bring any finished run directory back by the
``kind`` its summary names.

A run's summary carries ``kind`` and ``schema_version`` (bumped when a key changes meaning); its
keys are described by a JSON schema per kind (``sinklab/schemas/<kind>.json``).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

from .errors import SinklabError, check
from .jsonable import jsonable
from .runs import FAILED_CHECK, SUMMARY, read_run_info

SCHEMA_VERSION = 2  # 2: scan inputs' tokens (was max_tokens); no figures list (run.json's files); model facts in every table
#: The columns every table carries first, so that tables of several models, dtypes or devices concatenate.
MODEL_COLUMNS = ("model", "dtype", "device")


def stamped(kind: str, summary: dict, version: int = SCHEMA_VERSION) -> dict:
    """``summary`` as JSON values (non-finite numbers as None), led by its kind and schema version
    (a kind whose own keys changed meaning since carries its own, later, ``version``)."""
    return {"kind": kind, "schema_version": version, **jsonable(summary)}


def no_check(result: "RunResult") -> None:
    """A capability with no numerical self-check."""


@dataclass(frozen=True)
class RunContext:
    """What a run is given besides its configuration: ``subject``, a model the caller holds (None:
    the configuration's model is loaded); ``workdir``, the run directory when there is one (where a
    capability that works in steps keeps its checkpoints or its jobs' run directories; the others
    ignore it); ``launcher``, the settings its jobs run under (None: this machine's pool);
    ``resume``, whether the pipeline resumes an unfinished run there (from its checkpoints);
    ``overwrite``, whether the run there is to be replaced (a preflight that guards what a run
    directory holds has nothing to guard then)."""

    subject: Any = None
    workdir: Optional[Path] = None
    launcher: Any = None
    resume: bool = False
    overwrite: bool = False


@dataclass(frozen=True)
class Capability:
    """A kind of run, as the pipeline (:mod:`.pipeline`) runs it and :class:`RunResult` reads it.

    ``measure(cfg, context)`` computes in memory (:class:`RunContext`: the model the caller holds,
    the run directory, the launcher) and returns a :class:`RunResult`; ``write(out, result)``
    writes its data files and returns their names (the pipeline writes the figures, summary.json
    and the page); ``check(result)`` raises :class:`~.errors.NumericalCheckFailed` when the run's
    own check of its numbers failed; ``tables`` maps a table name to the function that turns a
    summary into rows (the first is ``frame()``'s default); ``read_data(run_dir)`` reads the data
    back; ``figures(result)`` builds its plotly figures by file name (the pipeline writes them as
    PNGs) and ``sections(summary, data, uid, run_dir)`` its report page's sections from memory;
    ``write_page(run_dir)`` writes the page (last); ``resumable(run_dir)`` says whether an
    unfinished run there continues (None: such runs start over); ``holds_runs``: its run directory
    holds runs each claimed by its own configuration (a sweep's), so another configuration of it
    resumes over them instead of being refused; ``needs_run_dir`` refuses a run
    without one (it keeps checkpoints while it works); ``preflight(cfg, context)`` refuses, before
    anything is written, what the run could not do (a lab that would not fit in memory, inputs
    longer than the model's positions)."""

    kind: str
    config: type
    measure: Callable[..., "RunResult"]
    write: Callable[[Path, "RunResult"], list]
    tables: dict
    write_page: Callable[[Path], Path]
    read_data: Callable[[Path], dict] = lambda run_dir: {}
    check: Callable[["RunResult"], None] = no_check
    figures: Optional[Callable[["RunResult"], dict]] = None
    sections: Optional[Callable[..., list]] = None
    resumable: Optional[Callable[[Path], bool]] = None
    holds_runs: bool = False
    needs_run_dir: bool = False
    preflight: Callable[[Any, "RunContext"], None] = lambda cfg, context: None


CAPABILITIES: dict[str, Capability] = {}


def register(capability: Capability) -> Capability:
    """Make a kind of run known to :func:`load_result` and :class:`RunResult`."""
    CAPABILITIES[capability.kind] = capability
    return capability


@dataclass
class RunResult:
    """A run's results in memory: ``summary`` (the dict summary.json holds), ``data`` (tensors and
    tables beyond it), ``out`` (the run directory, when one was written) and ``capability``."""

    summary: dict
    data: dict = field(default_factory=dict)
    out: Optional[Path] = None
    capability: Optional[Capability] = field(default=None, repr=False)
    reused: bool = False

    @property
    def kind(self) -> str:
        return self.summary["kind"]

    @property
    def tables(self) -> list[str]:
        """The names :meth:`frame` takes."""
        return list(self._capability().tables)

    def frame(self, table: Optional[str] = None):
        """A table of the summary as a pandas DataFrame, one observation per row (``table``: one of
        :attr:`tables`; default the first). Every row starts with the model, its dtype and device."""
        try:
            import pandas as pd
        except ImportError:
            raise SinklabError("frame() needs pandas: pip install pandas") from None
        capability = self._capability()
        tables = capability.tables
        name = table or next(iter(tables))
        check(name in tables, f"a {self.kind} result has no table {name!r}; its tables: {', '.join(tables)}")
        rows = list(tables[name](self.summary))
        return pd.DataFrame(rows) if rows else pd.DataFrame(columns=list(MODEL_COLUMNS))  # an empty table still concatenates

    def figures(self) -> dict:
        """Every figure of the run as plotly figures, by file name (what the run directory's PNGs show)."""
        figures = self._capability().figures
        if figures is None:
            raise SinklabError(f"a {self.kind} result has no figures")
        return figures(self)

    def page(self, path) -> Path:
        """Write the run's interactive report page to ``path`` from memory (its header from run.json
        when the result has a run directory); returns the path."""
        from . import html

        drawn = self._capability().sections
        if drawn is None:
            raise SinklabError(f"a {self.kind} result has no report page drawn from memory")
        sections = drawn(self.summary, self.data, html.dom_id(Path(path)), self.out)
        return html.write_page(
            Path(path), f"sinklab {self.kind}", [(f"{self.kind}: {html.esc(self.summary.get('model', ''))}", sections)]
        )

    def _capability(self) -> Capability:
        capability = self.capability or CAPABILITIES.get(self.kind)
        if capability is None:
            raise SinklabError(f"no capability of kind {self.kind!r} is loaded (import sinklab.api first)")
        return capability

    def __repr__(self) -> str:
        where = f", out={str(self.out)!r}" if self.out else ""
        return f"RunResult(kind={self.kind!r}, keys={len(self.summary)}, data={sorted(self.data)}{where})"


def read_summary(run_dir: Path) -> dict:
    """A run directory's summary.json, checked to be a sinklab summary (one line if not)."""
    path = Path(run_dir) / SUMMARY
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SinklabError(f"{run_dir} holds no finished run ({SUMMARY} is missing)") from None
    except (OSError, ValueError) as exc:
        raise SinklabError(
            f"{path} is damaged and cannot be read ({type(exc).__name__}); run the command again with --overwrite"
        ) from None
    check(
        isinstance(summary, dict) and isinstance(summary.get("kind"), str),
        f"{path} is not a sinklab summary (no kind); run the command again with --overwrite",
    )
    return summary


def load_result(run_dir) -> RunResult:
    """The result of a finished run directory, by the kind its summary names: ``.summary``, the data
    its files hold (``.data``), ``.frame()``, ``.figures()`` and ``.page()``. A run whose numerical
    check failed (run.json says so) comes back with a warning; a data file it lacks is one line."""
    path = Path(run_dir)
    check(path.is_dir(), f"no such run directory: {run_dir}")
    summary = read_summary(path)
    capability = CAPABILITIES.get(summary["kind"])
    if capability is None:
        raise SinklabError(f"{path} holds a run of kind {summary['kind']!r}, which this sinklab cannot read")
    failed = read_run_info(path).get(FAILED_CHECK)
    if failed is not None:
        warnings.warn(f"{path} failed its numerical check ({failed}): these results did not pass it", stacklevel=2)
    try:
        data = capability.read_data(path)
    except FileNotFoundError as exc:
        raise SinklabError(
            f"{path} lacks a file its {summary['kind']} run writes ({exc}): the run directory is incomplete; "
            "run its command again with --overwrite"
        ) from None
    return RunResult(summary, data, path, capability)


def model_columns(summary: dict) -> dict:
    """The model, dtype and device a table's rows carry (None where the run has no model)."""
    return {key: summary.get(key) for key in MODEL_COLUMNS}


def table_rows(summary: dict, rows: Iterable[dict]) -> Iterator[dict]:
    """``rows`` each led by :func:`model_columns`."""
    lead = model_columns(summary)
    for row in rows:
        yield {**lead, **row}
