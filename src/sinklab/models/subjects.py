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
from torch import nn

from ..core.errors import SinklabError
from ..core.hooks import HookSet
from . import hf
from .native import Transformer


@contextmanager
def _measuring(model: nn.Module, grad: bool) -> Iterator[None]:
    """What a session runs under. A run function's (``grad`` False): eval mode and ``no_grad``, the
    model's mode given back afterwards. With ``grad``: the caller's mode and autograd, untouched
    (attribution through an edit needs gradients; a transformers model in training mode with
    attention dropout is then refused by the instrumentation, not silently switched)."""
    was_training = model.training
    if not grad:
        model.eval()
    try:
        with nullcontext() if grad else torch.no_grad():
            yield
    finally:
        model.train(was_training)


class Subject:
    """A causal LM with named hooks: ``session()`` makes hooks fire, ``logits(ids)`` runs it.

    :meth:`from_model` wraps a model the caller already loaded (any device, dtype or device map)."""

    name: str
    tokenizer: object
    hooks: HookSet
    n_layers: int
    n_heads: int
    max_positions: Optional[int]
    vocab_size: int
    prefix_positions: int = 0  # learned sink tokens the model puts before the input

    @staticmethod
    def from_model(model: nn.Module, tokenizer=None, name: Optional[str] = None, query_chunk: Optional[int] = None) -> "Subject":
        """The documented way to hand sinklab a model that is already loaded: a transformers causal
        LM with its tokenizer (required: inputs, token strings and BOS come from it), what
        :func:`sinklab.load_model` returns (a :class:`~sinklab.models.hf.LoadedModel`, which brings
        its tokenizer), or a native :class:`Transformer` (tokenizer optional). Nothing is copied or
        moved; every notebook function accepts the result, and inputs follow the model's device.
        ``query_chunk``: query rows a transformers model attends at once (None: the default)."""
        chunk = hf.QUERY_CHUNK if query_chunk is None else query_chunk
        if isinstance(model, Subject):
            return model
        if isinstance(model, hf.LoadedModel):
            return HFSubject(model, chunk)
        if isinstance(model, Transformer):
            return NativeSubject(model, tokenizer, name or "native")
        if not isinstance(model, nn.Module) or not hasattr(model, "config") or not hasattr(model, "get_input_embeddings"):
            raise SinklabError(f"expected a transformers causal LM or a sinklab Transformer, got {type(model).__name__}")
        if tokenizer is None:
            raise SinklabError(
                f"{type(model).__name__} was given without its tokenizer: give it beside the model "
                "(intervene_model(model, tokenizer, [MaskSelf(10)]), Subject.from_model(model, tokenizer)), "
                "or what sinklab.load_model returns"
            )
        hf.check_supported(model)  # a clear error now if sinklab cannot measure it (not causal, no head, layers not found)
        label = name or getattr(model.config, "_name_or_path", "") or type(model).__name__
        return HFSubject(hf.LoadedModel(model, tokenizer, label, "object", getattr(model.config, "_commit_hash", None)), chunk)

    @property
    def device(self) -> torch.device:
        """Where input ids go (with a device map: the device of the input embeddings)."""
        raise NotImplementedError  # pragma: no cover - interface

    def layer_device(self, layer: int) -> torch.device:
        """Where block ``layer`` runs: its statistics are summed there (no copy per forward)."""
        return self.device

    def facts(self) -> dict:
        """Where and how the model runs (device, dtype, device map, revision), for summaries."""
        return {"device": str(self.device), "dtype": str(self.dtype).removeprefix("torch."), "device_map": None, "revision": None}

    @contextmanager
    def session(self, grad: bool = False) -> Iterator["Subject"]:  # pragma: no cover - interface
        """Make hooks fire for the block; under ``torch.no_grad`` unless ``grad`` (which leaves
        autograd as the caller set it: attribution through an edit needs gradients)."""
        raise NotImplementedError

    def logits(self, ids: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def token_nll(self, ids: torch.Tensor) -> torch.Tensor:
        """Next-token NLL (B, T - 1) in nats."""
        ids = ids.to(self.device)
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
        with _measuring(self.model, grad), hf.instrument(self.model, self.hooks, self.query_chunk):
            yield self

    @property
    def device(self) -> torch.device:
        return hf.input_device(self.model)

    def layer_device(self, layer: int) -> torch.device:
        return hf.execution_device(hf.decoder_layers(self.model)[layer])

    @property
    def dtype(self) -> torch.dtype:
        return self.model.get_input_embeddings().weight.dtype

    def facts(self) -> dict:
        return hf.model_facts(self.model)

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids.to(self.device), use_cache=False).logits

    def token_nll(self, ids: torch.Tensor) -> torch.Tensor:
        return hf.token_nll(self.model, ids.to(self.device))  # never materialises the full (T, vocab) logits

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
        with _measuring(self.model, grad):
            yield self

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(ids.to(self.device))

    def down_proj_weight(self, layer: int) -> Optional[torch.Tensor]:
        weight = self.model.down_proj_weight(layer)
        return weight.detach() if weight is not None else None

    @property
    def architecture(self) -> str:
        return "sinklab.Transformer"


def transformers_model(model) -> hf.LoadedModel:
    """The transformers model behind ``model`` (a :class:`~sinklab.models.hf.LoadedModel` or a
    Hugging Face :class:`Subject`), for the capabilities that drive transformers directly (the
    sink cache, the sink prefix, fine-tuned mitigations)."""
    if isinstance(model, hf.LoadedModel):
        return model
    if isinstance(model, HFSubject):
        return model.loaded
    raise SinklabError(f"this needs a transformers causal LM (Subject.from_model(model, tokenizer)), got {type(model).__name__}")
