"""The sink as a parameter: the keys and values of fixed leading tokens, computed once.

A token at position 0 sees only itself, so its keys and values in every layer are constants of
the model. Computed once in full precision and handed to the model as the start of its KV cache,
they stand in exactly for the token: the content keeps its positions (1, 2, ...), so RoPE distances
and learned position embeddings are unchanged, and the logits of the content equal those with the
token in the sequence. The token itself then never enters the forward pass, with its massive
activations (IntactKV, Liu et al. ACL 2024, keeps such pivot tokens' KV in full precision; CushionCache,
Son et al. EMNLP 2024, searches a prefix that absorbs the outliers, :mod:`.search`).

Works through the transformers Cache API (``DynamicCache`` built from the model's config, so
sliding-window layers stay sliding), with no model file forked. A saved prefix carries a
fingerprint of the model it was computed on (:func:`model_fingerprint`), and is refused by another.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Optional

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn

from ..core.atomic import atomic_path
from ..core.errors import SinklabError, check
from ..models.hf import decoder_layers, head_dim_of

FORMAT = "sinklab-sink-prefix/1"

#: Allowed max |logit difference| between the content's logits after the prefix and after the same
#: tokens in the sequence, in units of the model dtype's eps times the largest |logit|. Both sides
#: compute the same function and differ only in the order of floating-point reductions (the prefix
#: alone against inside a batch, attention over a cache against over a sequence): each reordered
#: sum differs by a few roundings, compounded over the layers. SmolLM2-135M (30 layers) measures
#: 18-21 eps of its largest logit in float32 (8-9.5e-5 on logits up to 37) and 3 in bfloat16, so 128
#: leaves a six-fold margin in float32; a wrong position or token moves logits by O(1), thousands of
#: times more. In bfloat16 (eps 2^-7) the same bound is a few logits: there it catches only gross errors.
EXACT_EPS = 128


@dataclass
class SinkPrefix:
    """Per layer, the keys and values (1, H_kv, P, D) of the ``token_ids`` at positions 0..P-1."""

    token_ids: tuple[int, ...]
    keys: list[torch.Tensor] = field(repr=False)
    values: list[torch.Tensor] = field(repr=False)
    fingerprint: Optional[str] = None  # of the model it was computed on (None: built by hand, not checked)
    _checked: Optional[weakref.ref] = field(default=None, repr=False, compare=False)  # the model it is known to fit

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
        keys, values = [layer.keys.clone() for layer in layers], [layer.values.clone() for layer in layers]
        return cls(tuple(int(t) for t in token_ids), keys, values, model_fingerprint(model), weakref.ref(model))

    def cache(self, model: nn.Module, batch: int = 1):
        """A fresh cache that starts with the prefix (in the model's dtype, on its device), for
        ``batch`` rows; the model's forward appends the content to it, so build one per forward."""
        self._check_fits(model)
        cache = _empty_cache(model)
        for i, (k, v) in enumerate(zip(self.keys, self.values)):
            cache.update(*(t.expand(batch, -1, -1, -1).to(device=model.device, dtype=model.dtype) for t in (k, v)), i)
        return cache

    def logits(self, model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, V) of the content ``ids`` (B, T) after the prefix."""
        return model(input_ids=ids, cache=self.cache(model, ids.shape[0]), use_cache=True).logits

    def save(self, path: str | Path, model_name: str = "") -> Path:
        """Write the prefix as safetensors (atomically), with the token ids, the model's name and
        fingerprint."""
        check(
            self.fingerprint is not None,
            "only a prefix computed on a model (SinkPrefix.compute) can be saved: it records the model's fingerprint",
        )
        tensors = {f"keys.{i}": k.detach().cpu().contiguous() for i, k in enumerate(self.keys)}
        tensors.update({f"values.{i}": v.detach().cpu().contiguous() for i, v in enumerate(self.values)})
        metadata = {
            "format": FORMAT,
            "token_ids": json.dumps(list(self.token_ids)),
            "model": model_name,
            "fingerprint": self.fingerprint,
        }
        with atomic_path(path) as tmp:
            save_file(tensors, str(tmp), metadata=metadata)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path, model: Optional[nn.Module] = None) -> "SinkPrefix":
        """Read a prefix written by :meth:`save` (safetensors only: no code is unpickled); with
        ``model``, check now that it was computed on that model (else at its first :meth:`cache`)."""
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
        if "fingerprint" not in metadata:
            raise SinklabError(
                f"{path} records no fingerprint of the model it was computed on "
                "(written by an older sinklab): compute the prefix again"
            )
        n = sum(name.startswith("keys.") for name in tensors)
        keys, values = [tensors[f"keys.{i}"] for i in range(n)], [tensors[f"values.{i}"] for i in range(n)]
        prefix = cls(tuple(json.loads(metadata["token_ids"])), keys, values, metadata["fingerprint"])
        if model is not None:
            prefix._check_fits(model)
        return prefix

    def _check_fits(self, model: nn.Module) -> None:
        """Refuse a model of other shapes, or (once per model) another model's fingerprint. Checked
        once: a model fine-tuned after the check (``--full``) keeps its prefix."""
        shape = ModelShape.of(model)
        if len(self.keys) != shape.n_layers or any(tuple(k.shape[1::2]) != (shape.kv_heads, shape.head_dim) for k in self.keys):
            raise SinklabError(
                f"this sink prefix was computed for another model: {len(self.keys)} layers of (KV heads, head size) "
                f"{tuple(self.keys[0].shape[1::2])}, the model has {shape.n_layers} of {(shape.kv_heads, shape.head_dim)}"
            )
        if self.fingerprint is None or (self._checked is not None and self._checked() is model):
            return
        if model_fingerprint(model) != self.fingerprint:
            raise SinklabError(
                "this sink prefix was computed on another model of the same shapes "
                f"(model fingerprint {self.fingerprint[:12]}, this model's {model_fingerprint(model)[:12]})"
            )
        self._checked = weakref.ref(model)


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
        head_dim = head_dim_of(cfg)
        kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        return cls(cfg.num_hidden_layers, cfg.num_attention_heads, kv_heads, head_dim, cfg.hidden_size)


def model_fingerprint(model: nn.Module) -> str:
    """A hash of the architecture, its sizes and the weights of the first and last decoder layer,
    rounded to bfloat16 (so float32 and bfloat16 loads of one checkpoint agree; a float16 load
    rounds some weights differently and gets another fingerprint). Cheap: two layers of weights.
    Every parameter must be on a real device, not only those two: adapt quantizes weights in place,
    and accelerate's hook would put an offloaded layer's originals back at each forward."""
    cfg = model.config.get_text_config(decoder=True)
    layers = decoder_layers(model)
    check(
        all(p.device.type != "meta" for p in model.parameters()),
        "sinklab adapt reads the model's weights (a prefix is fingerprinted by them), and this model keeps some "
        "offloaded (on meta until their forward): load it on one device for adapt",
    )
    digest = hashlib.sha256(json.dumps([cfg.model_type, cfg.vocab_size, *astuple(ModelShape.of(model))]).encode())
    for name, weight in sorted(
        {**dict(layers[0].named_parameters("first")), **dict(layers[-1].named_parameters("last"))}.items()
    ):
        digest.update(name.encode())
        digest.update(weight.detach().to("cpu", torch.float32).to(torch.bfloat16).view(torch.int16).numpy().tobytes())
    return digest.hexdigest()


def exact_tolerance(reference: torch.Tensor, dtype: torch.dtype) -> float:
    """The largest |logit difference| :data:`EXACT_EPS` allows against the ``reference`` logits
    of a model computing in ``dtype``."""
    return EXACT_EPS * torch.finfo(dtype).eps * float(reference.detach().float().abs().max())


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
