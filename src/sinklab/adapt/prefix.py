"""The sink as a parameter: the keys and values of fixed leading tokens, computed once.

A token at position 0 sees only itself, so its keys and values in every layer are constants of
the model. Computed once in full precision and handed to the model as the start of its KV cache,
they stand in exactly for the token: the content keeps its positions (1, 2, ...), so RoPE distances
and learned position embeddings are unchanged, and the logits of the content equal those with the
token in the sequence. The token itself then never enters the forward pass, with its massive
activations (IntactKV, Liu et al. ACL 2024, keeps such pivot tokens' KV in full precision; CushionCache,
Son et al. EMNLP 2024, searches a prefix that absorbs the outliers, :mod:`.search`).

Works through the transformers Cache API (``DynamicCache`` built from the model's config, so
sliding-window layers stay sliding), with no model file forked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn

from ..core.errors import SinklabError
from ..core.runs import atomic_path

FORMAT = "sinklab-sink-prefix/1"


@dataclass
class SinkPrefix:
    """Per layer, the keys and values (1, H_kv, P, D) of the ``token_ids`` at positions 0..P-1."""

    token_ids: tuple[int, ...]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def length(self) -> int:
        return len(self.token_ids)

    @classmethod
    @torch.no_grad()
    def compute(cls, model: nn.Module, token_ids: list[int]) -> "SinkPrefix":
        """Run ``token_ids`` alone through the model once and keep every layer's cache."""
        if not token_ids:
            raise SinklabError("a sink prefix needs at least one token")
        cache = _empty_cache(model)
        model(input_ids=torch.tensor([list(token_ids)], device=model.device), cache=cache, use_cache=True)
        layers = _cache_layers(cache)
        return cls(tuple(int(t) for t in token_ids), [layer.keys.clone() for layer in layers], [layer.values.clone() for layer in layers])

    def cache(self, model: nn.Module, batch: int = 1):
        """A fresh cache that starts with the prefix, for ``batch`` rows; the model's forward
        appends the content to it, so build one per forward."""
        self._check_fits(model)
        cache = _empty_cache(model)
        for i, (k, v) in enumerate(zip(self.keys, self.values)):
            cache.update(k.expand(batch, -1, -1, -1).to(model.device), v.expand(batch, -1, -1, -1).to(model.device), i)
        return cache

    def logits(self, model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, V) of the content ``ids`` (B, T) after the prefix."""
        return model(input_ids=ids, cache=self.cache(model, ids.shape[0]), use_cache=True).logits

    def save(self, path: str | Path, model_name: str = "") -> Path:
        """Write the prefix as safetensors (atomically), with the token ids and the model's name."""
        tensors = {f"keys.{i}": k.detach().cpu().contiguous() for i, k in enumerate(self.keys)}
        tensors.update({f"values.{i}": v.detach().cpu().contiguous() for i, v in enumerate(self.values)})
        metadata = {"format": FORMAT, "token_ids": json.dumps(list(self.token_ids)), "model": model_name}
        with atomic_path(path) as tmp:
            save_file(tensors, str(tmp), metadata=metadata)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> "SinkPrefix":
        """Read a prefix written by :meth:`save` (safetensors only: no code is unpickled)."""
        path = Path(path)
        if not path.is_file():
            raise SinklabError(f"no such sink prefix file: {path}")
        try:
            with safe_open(str(path), "pt") as f:
                metadata = f.metadata() or {}
                tensors = {name: f.get_tensor(name) for name in f.keys()}
        except (SafetensorError, OSError) as exc:
            raise SinklabError(f"{path} is not a safetensors file: {exc}") from None
        if metadata.get("format") != FORMAT:
            raise SinklabError(f"{path} is not a sinklab sink prefix (format {metadata.get('format')!r}, expected {FORMAT!r})")
        n = sum(name.startswith("keys.") for name in tensors)
        return cls(tuple(json.loads(metadata["token_ids"])), [tensors[f"keys.{i}"] for i in range(n)], [tensors[f"values.{i}"] for i in range(n)])

    def _check_fits(self, model: nn.Module) -> None:
        shape = ModelShape.of(model)
        if len(self.keys) != shape.n_layers or any(tuple(k.shape[1::2]) != (shape.kv_heads, shape.head_dim) for k in self.keys):
            raise SinklabError(
                f"this sink prefix was computed for another model: {len(self.keys)} layers of (KV heads, head size) "
                f"{tuple(self.keys[0].shape[1::2])}, the model has {shape.n_layers} of {(shape.kv_heads, shape.head_dim)}"
            )


@dataclass(frozen=True)
class ModelShape:
    """The attention shapes of a model, from its config."""

    n_layers: int
    n_heads: int
    kv_heads: int
    head_dim: int
    d_model: int

    @classmethod
    def of(cls, model: nn.Module) -> "ModelShape":
        cfg = model.config.get_text_config(decoder=True)
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        return cls(cfg.num_hidden_layers, cfg.num_attention_heads, kv_heads, head_dim, cfg.hidden_size)


def _empty_cache(model: nn.Module):
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def _cache_layers(cache) -> list:
    layers = getattr(cache, "layers", None)
    if not layers or getattr(layers[0], "keys", None) is None:
        raise SinklabError("the model did not fill a transformers cache; sink prefixes need a model that uses the Cache API")
    return layers


def bos_token(tokenizer, model: nn.Module) -> Optional[int]:
    """The fixed first token: the tokenizer's BOS, else the model config's, else None."""
    bos = getattr(tokenizer, "bos_token_id", None)
    return bos if bos is not None else getattr(model.config, "bos_token_id", None)
