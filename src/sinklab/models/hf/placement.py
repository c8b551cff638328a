"""Where a model goes and in which dtype: ``--device``, ``--dtype`` and ``--device-map`` resolved on
this machine, an impossible request (CUDA without CUDA, float16 on a CPU, a device map naming a
device that is not there) a one-line error before any weight is read; and how a config names a
device."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from pathlib import Path
from typing import Optional, Union

import torch
from torch import nn

from ...core.errors import SinklabError

#: ``--dtype`` names; "auto" is float32 on a CPU (bfloat16 matmuls are slow there and the metrics
#: are float32 anyway) and the checkpoint's own dtype on a GPU.
DTYPES = {"auto": None, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def device_name(device: Union[str, torch.device]) -> str:
    """How a config records a device: ``cuda`` for the first GPU (where ``--device auto``, ``cuda``
    and ``cuda:0`` all load a model), ``cuda:N`` for another, ``cpu``; so a model object on
    ``cuda:0`` and ``--device auto`` are one configuration."""
    device = torch.device(device)
    return "cuda" if device.type == "cuda" and not device.index else str(device)


def resolve_device(device: str = "auto") -> torch.device:
    """``auto`` -> the first GPU if PyTorch sees one, else the CPU; a GPU that is not there is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise SinklabError(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N") from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise SinklabError(
                f"--device {device} asks for CUDA, but PyTorch sees no GPU (torch {torch.__version__}; a CPU build?)"
            )
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise SinklabError(f"--device {device}: there are only {torch.cuda.device_count()} GPU(s)")
    elif resolved.type != "cpu":
        raise SinklabError(f"unsupported device {device!r}: use auto, cpu, cuda or cuda:N")
    return resolved


def resolve_dtype(dtype: Union[str, torch.dtype, None], device: torch.device) -> Optional[torch.dtype]:
    """The torch dtype of ``--dtype`` on ``device`` (see :data:`DTYPES`; None: the checkpoint's own);
    float16 needs a GPU."""
    if isinstance(dtype, torch.dtype):
        resolved = dtype
    elif dtype in (None, "auto"):
        resolved = torch.float32 if device.type == "cpu" else None  # None: the checkpoint's dtype
    elif dtype in DTYPES:
        resolved = DTYPES[dtype]
    else:
        raise SinklabError(f"unknown dtype {dtype!r}: choose from {', '.join(DTYPES)}")
    if resolved is torch.float16 and device.type == "cpu":
        raise SinklabError(
            "float16 needs a GPU (PyTorch's CPU kernels for it are missing or slow): use bfloat16 or float32 on a CPU"
        )
    return resolved


def check_device_map(device_map: Optional[str]) -> Union[str, dict, None]:
    """``--device-map``: "auto" (accelerate places the layers), or a JSON object (inline or a file)
    mapping module names to devices (``{"model.layers.0": 0, "model.layers.1": "cpu", ...}``)."""
    if device_map is None or device_map == "auto":
        return device_map
    if isinstance(device_map, dict):
        mapping = device_map
    else:
        text = device_map if device_map.lstrip().startswith("{") else _read_text(device_map, "--device-map")
        try:
            mapping = json.loads(text)
        except json.JSONDecodeError:
            raise SinklabError(f"--device-map must be auto, a JSON object or a JSON file, got {device_map!r}") from None
        if not isinstance(mapping, dict) or not mapping:
            raise SinklabError('--device-map must map module names to devices, e.g. {"model.layers.0": 0, "lm_head": "cpu"}')
    return {module: _map_device(where) for module, where in mapping.items()}


def _map_device(where) -> Union[int, str]:
    """One device of a device map, checked: "cpu", "disk", a GPU index (an int or a digit string,
    as accelerate takes them) or "cuda[:N]" (a GPU index for accelerate)."""
    if where in ("cpu", "disk"):
        return where
    if isinstance(where, str) and where.isdigit():
        where = int(where)
    if isinstance(where, int) and not isinstance(where, bool):
        resolve_device(f"cuda:{where}")
        return where
    if not isinstance(where, str):
        raise SinklabError(f"--device-map: {where!r} is not a device (use cpu, disk, a GPU index or cuda:N)")
    device = resolve_device(where)
    return "cpu" if device.type == "cpu" else (device.index or 0)


def _read_text(path: str, what: str) -> str:
    try:
        return Path(path).expanduser().read_text()
    except OSError as exc:
        raise SinklabError(
            f"{what} {path!r} is neither auto, a JSON object nor a readable file ({exc.strerror or exc})"
        ) from None


def spread(device_map) -> dict:
    """What ``from_pretrained`` takes to spread a model by ``device_map`` (checked): the map, and,
    where it sends modules to ``disk``, a fresh folder for accelerate to offload their weights to
    (they are read back from it layer by layer as the forward reaches them)."""
    mapping = check_device_map(device_map)
    if not (isinstance(mapping, dict) and "disk" in mapping.values()):
        return {"device_map": mapping}
    folder = tempfile.mkdtemp(prefix="sinklab-offload-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # the model reads it while the process lives
    return {"device_map": mapping, "offload_folder": folder}


def execution_device(module: nn.Module) -> torch.device:
    """Where ``module`` computes: its parameters' device, or, for a module accelerate offloaded
    (to the CPU beside a GPU, or to disk: its parameters are on ``meta`` until its forward), the
    device accelerate's hook runs it on. Statistics summed beside an offloaded layer belong there,
    not on ``meta``."""
    device = next(module.parameters()).device
    if device.type != "meta":
        return device
    for part in module.modules():  # the hook sits on the module the device map named: this one or a part
        executes = getattr(getattr(part, "_hf_hook", None), "execution_device", None)
        if executes is not None:
            return torch.device(executes)
    return device


def stored_parameter(module: nn.Module, name: str) -> torch.Tensor:
    """``module``'s own parameter ``name`` with its values: where accelerate offloaded the module
    (to the CPU beside a GPU, or to disk), the parameter is on ``meta`` outside its forward and the
    values live in the store accelerate's hook reads them from. Reading a weight outside the
    forward (a super neuron's down-projection column) must go there. accelerate hooks each offloaded
    module that holds parameters itself; a store on a parent block only (``preload_module_classes``)
    is not searched, and gets the error."""
    value = getattr(module, name)
    if value.device.type != "meta":
        return value
    store = getattr(getattr(module, "_hf_hook", None), "weights_map", None)
    if store is None:
        what = f"{type(module).__name__}.{name}"
        raise SinklabError(f"{what} is on meta and no offload store holds it: load the model on one device")
    return store[name]
