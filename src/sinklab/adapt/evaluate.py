"""What the sink in the token stream costs: perplexity and activation maxima of the same content
with the first token in the stream, replaced by its cached keys and values, or absent.

Every condition scores the same targets, content tokens 2..T predicted from what precedes them,
so perplexities compare directly. Text windows come from documents split by name: calibration and
fine-tuning read one part, perplexity the held-out rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch import nn

from ..core.configs import setting
from ..core.corpus import load_corpus, spaced_windows, split_documents
from ..core.errors import SinklabError, check
from ..models.hf import head_nll
from .adapted import AdaptedModel
from .prefix import SinkPrefix
from .quantize import DEFAULT_SCHEMES, QUANT_SCHEMES, check_scheme

HELD_OUT_EVERY = 4  # every 4th document (by name) is held out for perplexity


@dataclass
class Evaluation:
    """Where perplexity is measured and under which quantization: held-out windows of a corpus
    whose other documents give the calibration windows (and the fine-tuning text)."""

    corpus: str = setting(
        "shakespeare",
        help="shakespeare, a text file or folder, or hf:NAME (documents split: training and calibration / held out)",
    )
    tokens: int = setting(256, help="tokens per evaluation window")
    windows: int = setting(8, help="held-out windows scored")
    calibration: int = setting(4, help="windows for static scales and the prefix search")
    schemes: tuple[str, ...] = setting(
        DEFAULT_SCHEMES,
        flag="--schemes",
        aliases=("--quant",),  # compress's --quant names a KV-cache quantizer
        metavar="S[,S...]",
        choices=tuple(QUANT_SCHEMES),
        shown=",".join(DEFAULT_SCHEMES),
        help=f"quantization schemes (weights, and activations but in w8 and w4), from {', '.join(QUANT_SCHEMES)}",
    )

    def __post_init__(self) -> None:
        check(self.tokens >= 2, f"--tokens must be at least 2, got {self.tokens}")
        check(self.windows >= 1 and self.calibration >= 1, "--windows and --calibration must be at least 1")
        for name in self.schemes:
            check_scheme(name)


@dataclass
class Condition:
    """How the content is presented: leading tokens in the stream, and/or a cached prefix."""

    name: str
    lead: tuple[int, ...] = ()
    prefix: Optional[SinkPrefix] = None
    adapted: Optional[AdaptedModel] = None  # a mitigation, which brings its own prefix


def corpus_tokens(corpus: str, tokenizer, held_out: bool, limit: int) -> torch.Tensor:
    """Token ids of the held-out documents (``held_out``) or the others, in order, encoded without
    special tokens; documents are read until at least ``limit`` tokens are collected."""
    train, val = split_documents(load_corpus(corpus), HELD_OUT_EVERY)
    ids: list[int] = []
    for doc in val if held_out else train:
        ids.extend(tokenizer(doc.text, add_special_tokens=False)["input_ids"])
        if len(ids) >= limit:
            break
    return torch.tensor(ids, dtype=torch.long)


def corpus_windows(corpus: str, tokenizer, length: int, count: int, held_out: bool) -> torch.Tensor:
    """``count`` windows (count, length) of consecutive tokens, evenly spaced over the held-out
    documents (``held_out``) or the others."""
    ids = corpus_tokens(corpus, tokenizer, held_out, 8 * length * count)  # plenty to spread the windows over
    if len(ids) // length < count:
        part = "held-out" if held_out else "calibration"
        raise SinklabError(f"the {part} part of {corpus!r} has {len(ids)} tokens: too few for {count} windows of {length}")
    return spaced_windows(ids, length, count)


def prepend(tokens: Sequence[int], content: torch.Tensor) -> torch.Tensor:
    """(B, P + T): ``tokens`` before every row of ``content`` (B, T), on the content's device."""
    lead = torch.tensor([list(tokens)], dtype=torch.long, device=content.device).expand(content.shape[0], -1)
    return torch.cat([lead, content], dim=1)


@torch.no_grad()
def content_hidden(model: nn.Module, content: torch.Tensor, condition: Condition) -> torch.Tensor:
    """Final hidden states (B, T, d) of the content positions under ``condition``."""
    if condition.adapted is not None:
        with condition.adapted.applied():
            return condition.adapted.hidden(content)
    ids = prepend(condition.lead, content.to(model.device))
    cache = condition.prefix.cache(model, content.shape[0]) if condition.prefix is not None else None
    hidden = model.base_model(input_ids=ids, cache=cache, use_cache=cache is not None).last_hidden_state
    return hidden[:, len(condition.lead) :]


def content_nll(model: nn.Module, windows: torch.Tensor, condition: Condition) -> torch.Tensor:
    """NLL (N, T - 1) of every window's tokens 2..T, one window per forward (a per-tensor scale
    must not depend on which windows share a batch)."""
    rows = []
    for window in windows:
        hidden = content_hidden(model, window[None], condition)
        rows.append(head_nll(model, hidden[:, :-1], window[None, 1:].to(hidden.device)))
    return torch.cat(rows)


def perplexity(nll: torch.Tensor) -> float:
    return float(nll.double().mean().exp())
