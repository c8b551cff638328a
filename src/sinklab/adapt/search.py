"""A greedy search for prefix tokens that absorb the content's outliers (the CushionCache idea,
Son et al., EMNLP 2024).

Tokens are added one at a time: each candidate is appended to the prefix found so far, the prefix's
keys and values are computed (:class:`~.prefix.SinkPrefix`), and the content is run after it; the
candidate whose content sends the smallest largest |activation| into any decoder linear layer is
kept. Candidates are the most frequent tokens of the calibration text plus the tokenizer's special
tokens, and the search stops when its time budget is spent, keeping the best prefix so far: the best
token of a scan cut short is appended only if it beats the prefix without it.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch import nn

from ..core.progress import progress_bar
from .evaluate import Condition, content_hidden
from .prefix import SinkPrefix
from .quantize import quantized


@dataclass
class SearchResult:
    tokens: tuple[int, ...]  # the prefix, leading tokens included
    objective: list[float] = field(default_factory=list)  # largest |activation| after each added token
    evaluated: int = 0
    seconds: float = 0.0
    complete: bool = True  # False: the time budget ran out before every position was searched


def candidate_tokens(windows: torch.Tensor, tokenizer, count: int) -> list[int]:
    """The ``count`` most frequent tokens of ``windows`` and every special token."""
    frequent = [t for t, _ in Counter(windows.flatten().tolist()).most_common(count)]
    special = sorted(set(getattr(tokenizer, "all_special_ids", None) or []))
    return list(dict.fromkeys(special + frequent))


@torch.no_grad()
def largest_activation(model: nn.Module, content: torch.Tensor, prefix_tokens: tuple[int, ...]) -> float:
    """Largest |input| of any decoder linear layer over ``content`` after the cached prefix."""
    condition = Condition("search", prefix=SinkPrefix.compute(model, list(prefix_tokens)) if prefix_tokens else None)
    with quantized(model, None) as log:
        content_hidden(model, content, condition)
    return max(log.by_layer())


def _shorter_score(model: nn.Module, content: torch.Tensor, result: SearchResult) -> float:
    """The objective of the prefix found so far (the leading tokens' own when nothing was added)."""
    return result.objective[-1] if result.objective else largest_activation(model, content, result.tokens)


def search_prefix(
    model: nn.Module, content: torch.Tensor, lead: tuple[int, ...], n_tokens: int, candidates: list[int], seconds: float
) -> SearchResult:
    """Append ``n_tokens`` tokens to ``lead`` greedily, within ``seconds`` of wall time."""
    start = time.perf_counter()
    result = SearchResult(tuple(lead))
    bar = progress_bar(total=n_tokens * len(candidates), desc="prefix search", unit="cand")
    try:
        for _ in range(n_tokens):
            best = None
            for token in candidates:
                if time.perf_counter() - start > seconds:
                    result.complete = False
                    break
                score = largest_activation(model, content, result.tokens + (token,))
                result.evaluated += 1
                bar.update()
                if best is None or score < best[0]:
                    best = (score, token)
            if best is None:
                break
            if not result.complete and best[0] >= _shorter_score(model, content, result):
                break  # the best of a partial scan must beat the prefix without it
            result.tokens += (best[1],)
            result.objective.append(best[0])
            if not result.complete:
                break
    finally:
        bar.close()
    result.seconds = time.perf_counter() - start
    return result
