"""Language-model data: a corpus tokenised once into cached memmaps, split by document.

Tokenisers: ``default`` is the default model's tokenizer (SmolLM2), with the vocabulary compacted
to the tokens the corpus actually uses (about a third of 49k for Shakespeare), which keeps the
embedding and output layer of a small CPU model affordable without changing the tokenisation;
``bytes`` is plain UTF-8 bytes (vocabulary 256). Documents are joined with an end-of-document id.

The validation split takes whole documents (every ``val_every``-th by name), so no text is in
both splits. Caches live under ``$SINKLAB_CACHE/data`` and are written atomically; a compacted
cache keeps a copy of its tokenizer, so decoding never needs the model's weights.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..core.atomic import atomic_dir, atomic_path
from ..core.corpus import Document, load_corpus, split_documents
from ..core.errors import SinklabError, check
from ..models.hf import cache_root, default_gguf_path, dequantised_dir

TOKENIZERS = ("default", "bytes")
TOKENIZER_DIR = "tokenizer"


@dataclass
class TokenData:
    """Train and validation token streams plus what is needed to decode and score them."""

    train: np.ndarray  # (N,) token ids in the compact vocabulary
    val: np.ndarray
    vocab_size: int
    eod: int  # end-of-document id
    val_bytes: int  # UTF-8 bytes of the validation text, for bits per byte
    val_tokens: int
    tokenizer: str
    source_ids: Optional[np.ndarray]  # compact id -> original tokenizer id (None for bytes)
    meta: dict
    root: Path  # the cache folder (holds a copy of the tokenizer, for decoding)
    bos: Optional[int] = None  # a reserved id (the last) put first in every window, when asked for

    def with_bos(self) -> "TokenData":
        """The same data with one fixed first token in every window (a new id after the vocabulary)."""
        return replace(self, bos=self.vocab_size, vocab_size=self.vocab_size + 1)

    def check_windows(self, seq_len: int) -> None:
        window = seq_len + 1
        check(
            len(self.train) > window * 2,
            f"the corpus is smaller than one batch: {len(self.train)} training tokens for windows of {window}",
        )
        check(
            len(self.val) > window, f"the validation split ({len(self.val)} tokens) is shorter than one window of {window} tokens"
        )

    def describe(self) -> dict:
        """What config.json records of the data."""
        return self.meta | {"train_documents": len(self.meta["train_documents"]), "bos_id": self.bos}

    def decode(self, ids: list[int]) -> str:
        return decode(self, ids)

    def task_metrics(self, model, batches: list) -> dict:
        """Natural text has no task-specific metrics."""
        return {}

    def bits_per_byte(self, loss_nats: float) -> float:
        """Validation loss per token (nats) as bits per UTF-8 byte of the validation text."""
        return loss_nats * self.val_tokens / (math.log(2) * self.val_bytes)

    def unigram_val_loss(self) -> float:
        """Validation loss (nats per token) of an add-one unigram model of the training split.

        The floor a language model has to beat to show it learned more than token frequencies.
        """
        counts = np.bincount(self.train, minlength=self.vocab_size).astype(np.float64) + 1.0
        return float(-np.log(counts / counts.sum())[self.val].mean())

    def batch(self, split: str, batch: int, seq_len: int, generator: torch.Generator) -> torch.Tensor:
        """(batch, seq_len + 1) random windows: inputs are [:, :-1], targets [:, 1:]; with a BOS id,
        column 0 is that id and the text fills the rest."""
        data = self.train if split == "train" else self.val
        starts = torch.randint(len(data) - seq_len - 1, (batch,), generator=generator)
        rows = torch.from_numpy(np.stack([data[s : s + seq_len + 1] for s in starts.tolist()]).astype(np.int64))
        if self.bos is not None:
            rows = torch.cat([torch.full((batch, 1), self.bos, dtype=torch.long), rows[:, :-1]], dim=1)
        return rows


def cache_dir() -> Path:
    return cache_root() / "data"


def load_token_data(corpus: str, tokenizer: str = "default", val_every: int = 10) -> TokenData:
    """Tokenise ``corpus`` once (cached by corpus content and tokenizer) and load the splits."""
    check(tokenizer in TOKENIZERS, f"unknown tokenizer {tokenizer!r}; choose one of: {', '.join(TOKENIZERS)}")
    docs = load_corpus(corpus)
    key = _cache_key(docs, tokenizer, val_every)
    where = cache_dir() / key
    if not (where / "meta.json").exists():
        _build(docs, tokenizer, val_every, where)
    meta = json.loads((where / "meta.json").read_text())
    dtype = np.dtype(meta["dtype"])
    source = np.load(where / "source_ids.npy") if (where / "source_ids.npy").exists() else None
    return TokenData(
        train=np.memmap(where / "train.bin", dtype=dtype, mode="r"),
        val=np.memmap(where / "val.bin", dtype=dtype, mode="r"),
        vocab_size=meta["vocab_size"],
        eod=meta["eod"],
        val_bytes=meta["val_bytes"],
        val_tokens=meta["val_tokens"],
        tokenizer=tokenizer,
        source_ids=source,
        meta=meta,
        root=where,
    )


def _cache_key(docs: list[Document], tokenizer: str, val_every: int) -> str:
    h = hashlib.sha256(f"{tokenizer}:{val_every}".encode())
    for d in docs:
        h.update(d.name.encode())
        h.update(hashlib.sha256(d.text.encode("utf-8", "replace")).digest())
    return f"{tokenizer}-{h.hexdigest()[:16]}"


def _build(docs: list[Document], tokenizer: str, val_every: int, where: Path) -> None:
    if len(docs) == 1:  # one file: split it into chunks so that there is something to hold out
        docs = _paragraph_documents(docs[0])
    train_docs, val_docs = split_documents(docs, val_every)
    encode, eod_source, tok = _encoder(tokenizer)
    train_raw = _stream(train_docs, encode, eod_source)
    val_raw = _stream(val_docs, encode, eod_source)
    if tokenizer == "bytes":
        source, train, val, vocab = None, train_raw, val_raw, 257
    else:
        source = np.unique(np.concatenate([train_raw, val_raw]))
        train, val = np.searchsorted(source, train_raw), np.searchsorted(source, val_raw)
        vocab = len(source)
    dtype = np.uint16 if vocab <= np.iinfo(np.uint16).max else np.uint32
    where.mkdir(parents=True, exist_ok=True)
    for name, arr in (("train.bin", train), ("val.bin", val)):
        with atomic_path(where / name) as tmp:
            arr.astype(dtype).tofile(tmp)
    if source is not None:
        with atomic_path(where / "source_ids.npy") as tmp:
            with open(tmp, "wb") as fh:
                np.save(fh, source)
        _save_tokenizer_copy(tok, where)
    eod = 256 if source is None else int(np.searchsorted(source, eod_source))
    meta = {
        "tokenizer": tokenizer,
        "vocab_size": int(vocab),
        "eod": eod,
        "dtype": np.dtype(dtype).name,
        "train_tokens": int(len(train)),
        "val_tokens": int(len(val)),
        "val_bytes": int(sum(len(d.text.encode("utf-8")) for d in val_docs)),
        "train_documents": [d.name for d in train_docs],
        "val_documents": [d.name for d in val_docs],
    }
    with atomic_path(where / "meta.json") as tmp:
        tmp.write_text(json.dumps(meta, indent=1))


def _paragraph_documents(doc: Document, target_chars: int = 20_000) -> list[Document]:
    """Cut one long text into roughly ``target_chars`` pieces at paragraph breaks."""
    pieces, current = [], []
    for para in doc.text.split("\n\n"):
        current.append(para)
        if sum(len(p) for p in current) >= target_chars:
            pieces.append("\n\n".join(current))
            current = []
    if current:
        pieces.append("\n\n".join(current))
    return [Document(f"{doc.name}#{i:04d}", text) for i, text in enumerate(pieces)]


def _encoder(tokenizer: str):
    """(text -> ids, end-of-document id, tokenizer object or None) for the named tokenizer."""
    if tokenizer == "bytes":
        return (lambda text: np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)), 256, None
    tok = default_tokenizer()
    eod = tok.eos_token_id if tok.eos_token_id is not None else 0
    return (lambda text: np.asarray(tok(text, add_special_tokens=False)["input_ids"], dtype=np.int64)), eod, tok


def _save_tokenizer_copy(tok, where: Path) -> None:
    """Keep the tokenizer beside the token cache, so decoding needs neither the model nor its weights."""
    with atomic_dir(where / TOKENIZER_DIR) as tmp:
        tok.save_pretrained(tmp)


@functools.lru_cache(maxsize=4)
def _cached_tokenizer(folder: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def default_tokenizer():
    """The default model's tokenizer (from the dequantised cache, without loading the weights)."""
    return _cached_tokenizer(str(dequantised_dir(default_gguf_path())))


def _stream(docs: list[Document], encode, eod: int) -> np.ndarray:
    parts = []
    for d in docs:
        parts.append(encode(d.text))
        parts.append(np.asarray([eod], dtype=np.int64))
    stream = np.concatenate(parts)
    if len(stream) < 2:
        raise SinklabError("the corpus has too little text to train on")
    return stream


def decode(data: TokenData, ids: list[int]) -> str:
    """Text of compact ids (for samples and token labels); the reserved BOS id reads ``<bos>``."""
    if data.bos is not None and data.bos in ids:
        return "".join("<bos>" if i == data.bos else decode(replace(data, bos=None), [i]) for i in ids)
    if data.source_ids is None:
        return bytes(i for i in ids if i < 256).decode("utf-8", "replace")
    copy = data.root / TOKENIZER_DIR  # absent in caches built before copies were kept
    tok = _cached_tokenizer(str(copy)) if copy.exists() else default_tokenizer()
    return tok.decode([int(data.source_ids[i]) for i in ids])
