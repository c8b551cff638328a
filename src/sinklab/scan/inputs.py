"""Token inputs for scans and interventions: a text file, a prompt, a corpus, or random tokens.

Whether a BOS token is prepended is always explicit (``bos`` = yes / no / auto) and recorded: a
sink at position 0 means something different with and without it. ``tokens`` (T) counts every
position the model sees, BOS included. ``text`` is a file and ``prompt`` a string, on the command
line and in the notebook alike.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import torch

from ..core.configs import setting
from ..core.corpus import load_corpus
from ..core.errors import SinklabError, check

#: ``bos`` means the same everywhere: whether a BOS token is put first in every sequence.
BOS_CHOICES = ("auto", "yes", "no")


@dataclass
class InputSpec:
    """What a scan or an intervention reads: exactly one source, ``text`` (a file), ``prompt`` (a
    string), ``corpus`` or ``random_tokens``; the default is windows of the Shakespeare corpus."""

    text: Optional[str] = setting(None, help="read exactly the tokens of this text file (truncated to --tokens)", metavar="FILE")
    prompt: Optional[str] = setting(None, help="this string")
    corpus: Optional[str] = setting(
        None, help="windows of a corpus: shakespeare (the default input), a text file or folder, hf:NAME", metavar="NAME"
    )
    random_tokens: bool = setting(False, help="uniform random token ids (the control of Gu et al. and Li et al.)")
    tokens: int = setting(64, help="tokens per sequence T, BOS included", aliases=("--max-tokens",))
    batch: int = setting(8, help="number of sequences (at least 2 for the variance curve)")
    bos: str = setting(
        "auto", help="put a BOS token first in every sequence: yes, no, or auto (when the tokenizer has one)", choices=BOS_CHOICES
    )
    seed: int = setting(0, help="seed for corpus windows and random tokens")

    def __post_init__(self) -> None:
        chosen = [self.text is not None, self.prompt is not None, self.corpus is not None, self.random_tokens]
        check(sum(chosen) <= 1, "give one input: --text, --prompt, --corpus or --random-tokens")
        if not any(chosen):
            self.corpus = "shakespeare"
        check(self.tokens >= 2, f"--tokens must be at least 2, got {self.tokens}")
        check(self.batch >= 1, f"--batch must be at least 1, got {self.batch}")
        check(self.bos in BOS_CHOICES, f"--bos must be yes, no or auto, got {self.bos!r}")
        check(self.prompt is None or self.prompt.strip() != "", "the prompt holds no text (it is empty or only whitespace)")

    @property
    def kind(self) -> str:
        if self.text is not None:
            return "text"
        if self.prompt is not None:
            return "prompt"
        return "random_tokens" if self.random_tokens else "corpus"


def renamed_max_tokens(inputs: dict) -> dict:
    """Runs before config version 1 called the sequence length ``max_tokens``."""
    return {("tokens" if k == "max_tokens" else k): v for k, v in inputs.items()}


@dataclass
class Inputs:
    ids: torch.Tensor  # (N, T) token ids
    bos_prepended: bool
    description: dict

    @property
    def tokens(self) -> int:
        return self.ids.shape[1]


def build_inputs(spec: InputSpec, tokenizer, max_positions: Optional[int] = None, vocab_size: Optional[int] = None) -> Inputs:
    """Token ids (N, T) for ``spec``; T <= ``tokens`` and within the model's maximum."""
    if max_positions is not None and spec.tokens > max_positions:
        raise SinklabError(f"--tokens {spec.tokens} is longer than the model allows ({max_positions} positions)")
    bos_id = getattr(tokenizer, "bos_token_id", None)
    if spec.bos == "yes" and bos_id is None:
        raise SinklabError("--bos yes, but the tokenizer defines no BOS token")
    prepend = bos_id is not None and spec.bos != "no"
    body = spec.tokens - int(prepend)
    g = torch.Generator().manual_seed(spec.seed)
    rows = {
        "text": lambda: _windows(_encode(tokenizer, _read(spec.text)), body, spec.batch, spec.text),
        "prompt": lambda: _windows(_encode(tokenizer, spec.prompt), body, spec.batch, "the prompt"),
        "corpus": lambda: _corpus_windows(spec.corpus, tokenizer, body, spec.batch, g),
        "random_tokens": lambda: _random_rows(tokenizer, vocab_size, body, spec.batch, g),
    }[spec.kind]()
    ids = torch.tensor(rows, dtype=torch.long)
    if prepend:
        ids = torch.cat([torch.full((ids.shape[0], 1), bos_id, dtype=torch.long), ids], dim=1)
    description = {
        **asdict(spec),
        "kind": spec.kind,
        "sequences": ids.shape[0],
        "tokens": ids.shape[1],
        "bos_token_id": bos_id if prepend else None,
    }
    return Inputs(ids, prepend, description)


def _read(path: str) -> str:
    p = Path(path).expanduser()
    try:
        found = p.is_file()
    except OSError:  # a name no file system takes (too long): a string given as a file
        found = False
    if not found:
        raise SinklabError(
            f"no such text file: {path[:60]}{'...' if len(path) > 60 else ''} "
            "(--text / text= names a file; to read a string, give it as --prompt / prompt=)"
        )
    text = p.read_text(encoding="utf-8", errors="replace")
    check(text.strip() != "", f"the text file {path} holds no text (it is empty or only whitespace)")
    return text


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _windows(ids: list[int], length: int, batch: int, what: str) -> list[list[int]]:
    """Up to ``batch`` consecutive windows of ``length`` tokens (one shorter window if that is all)."""
    if not ids:
        raise SinklabError(f"{what} contains no tokens")
    if len(ids) <= length:
        return [ids]
    n = min(batch, len(ids) // length)
    return [ids[i * length : (i + 1) * length] for i in range(n)]


def _corpus_windows(spec: str, tokenizer, length: int, batch: int, g: torch.Generator) -> list[list[int]]:
    """``batch`` windows of exactly ``length`` tokens from random documents and offsets."""
    docs = load_corpus(spec)
    rows = []
    for _ in range(50 * batch):
        if len(rows) == batch:
            break
        doc = docs[int(torch.randint(len(docs), (1,), generator=g))]
        span = 8 * length + 64  # characters: comfortably more than `length` tokens of English
        start = int(torch.randint(max(1, len(doc.text) - span), (1,), generator=g))
        ids = _encode(tokenizer, doc.text[start : start + span])[1:]  # drop a possibly cut first token
        if len(ids) >= length:
            rows.append(ids[:length])
    if len(rows) < batch:
        raise SinklabError(f"the corpus {spec!r} is too small for {batch} windows of {length} tokens")
    return rows


def _random_rows(tokenizer, vocab_size: Optional[int], length: int, batch: int, g: torch.Generator) -> list[list[int]]:
    """Uniform random ids over the vocabulary minus special tokens (Gu et al. 2025; Li et al. 2026)."""
    vocab = vocab_size or len(tokenizer)
    special = torch.tensor(sorted(set(getattr(tokenizer, "all_special_ids", []) or [])), dtype=torch.long)
    allowed = torch.ones(vocab, dtype=torch.bool)
    allowed[special[special < vocab]] = False
    pool = allowed.nonzero().flatten()
    return pool[torch.randint(len(pool), (batch, length), generator=g)].tolist()
