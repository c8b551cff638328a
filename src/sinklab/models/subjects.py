"""One interface over the models sinklab measures and edits: Hugging Face causal LMs and native
:class:`~sinklab.models.native.Transformer` language models.

Both fire the same hook names, so the scanner's recorder and the interventions are written once
against :class:`Subject`.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Iterator, Optional

import torch
import torch.nn.functional as F

from ..core.hooks import HookSet
from . import hf
from .native import Transformer


def _autograd(grad: bool):
    """What a session runs under: ``no_grad``, or autograd as the caller set it."""
    return nullcontext() if grad else torch.no_grad()


class Subject:
    """A causal LM with named hooks: ``session()`` makes hooks fire, ``logits(ids)`` runs it."""

    name: str
    tokenizer: object
    hooks: HookSet
    n_layers: int
    n_heads: int
    max_positions: Optional[int]
    vocab_size: int
    prefix_positions: int = 0  # learned sink tokens the model puts before the input

    @contextmanager
    def session(self, grad: bool = False) -> Iterator["Subject"]:  # pragma: no cover - interface
        """Make hooks fire for the block; under ``torch.no_grad`` unless ``grad`` (which leaves
        autograd as the caller set it: attribution through an edit needs gradients)."""
        raise NotImplementedError

    def logits(self, ids: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def token_nll(self, ids: torch.Tensor) -> torch.Tensor:
        """Next-token NLL (B, T - 1) in nats."""
        logits = self.logits(ids)
        return F.cross_entropy(logits[:, :-1].float().transpose(1, 2), ids[:, 1:], reduction="none")

    def down_proj_weight(self, layer: int) -> Optional[torch.Tensor]:  # pragma: no cover - interface
        raise NotImplementedError

    def token_strings(self, ids: list[int]) -> list[str]:
        if self.tokenizer is None:
            return [str(i) for i in ids]
        return [self.tokenizer.decode([i]) for i in ids]


class HFSubject(Subject):
    def __init__(self, loaded: hf.LoadedModel, query_chunk: Optional[int] = hf.QUERY_CHUNK) -> None:
        self.loaded, self.query_chunk = loaded, query_chunk
        self.name, self.tokenizer, self.model = loaded.name, loaded.tokenizer, loaded.model
        self.hooks = HookSet()
        self.n_layers = loaded.n_layers
        self.n_heads = loaded.model.config.num_attention_heads
        self.max_positions = loaded.max_positions
        self.vocab_size = loaded.model.config.vocab_size

    @contextmanager
    def session(self, grad: bool = False):
        with _autograd(grad), hf.instrument(self.model, self.hooks, self.query_chunk):
            yield self

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, use_cache=False).logits

    def token_nll(self, ids: torch.Tensor) -> torch.Tensor:
        return hf.token_nll(self.model, ids)  # never materialises the full (T, vocab) logits

    def down_proj_weight(self, layer: int) -> Optional[torch.Tensor]:
        return hf.down_proj_weight(self.model, layer)

    @property
    def architecture(self) -> str:
        return hf.describe_architecture(self.model)


class NativeSubject(Subject):
    """A native token-level :class:`Transformer` (e.g. from ``sinklab pretrain``)."""

    def __init__(self, model: Transformer, tokenizer=None, name: str = "native") -> None:
        if model.cfg.vocab_size is None:
            raise ValueError("NativeSubject needs a language model (ModelConfig.vocab_size)")
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.hooks = model.hooks
        self.n_layers = model.n_layers
        self.n_heads = model.cfg.n_heads
        self.max_positions = model.cfg.max_seq_len - model.cfg.sink_tokens
        self.vocab_size = model.cfg.vocab_size
        self.prefix_positions = model.cfg.sink_tokens

    @contextmanager
    def session(self, grad: bool = False):
        was_training = self.model.training
        self.model.eval()
        try:
            with _autograd(grad):
                yield self
        finally:
            self.model.train(was_training)

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(ids)

    def down_proj_weight(self, layer: int) -> Optional[torch.Tensor]:
        weight = self.model.down_proj_weight(layer)
        return weight.detach() if weight is not None else None

    @property
    def architecture(self) -> str:
        return "sinklab.Transformer"
