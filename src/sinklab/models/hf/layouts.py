"""Where each architecture keeps its decoder layers and its FFN down projection: one line per
architecture in :data:`LAYOUTS`, and a generic fallback that inspects the modules.

The down projection's input is the FFN intermediate activation (``mlp.hook_post``) and its
weight says which residual dimensions a neuron writes (super neurons). An empty ``down_proj``
means the architecture has no single such module (e.g. mixture-of-experts blocks): the scanner
then skips the FFN probes.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import reduce
from typing import Optional

import torch
from torch import nn

from ...core.errors import SinklabError
from .placement import stored_parameter


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
    "Gemma3ForCausalLM": Layout("model.layers", "mlp.down_proj"),
    "PhiForCausalLM": Layout("model.layers", "mlp.fc2"),
    "GPT2LMHeadModel": Layout("transformer.h", "mlp.c_proj"),
    "GPTNeoXForCausalLM": Layout("gpt_neox.layers", "mlp.dense_4h_to_h"),
    "OPTForCausalLM": Layout("model.decoder.layers", "fc2"),
    "GptOssForCausalLM": Layout("model.layers", ""),
}


def get_submodule(module: nn.Module, path: str) -> nn.Module:
    return reduce(getattr, path.split("."), module)


def layout_of(model: nn.Module, warn: bool = True) -> Layout:
    """The table entry for the model's class, else a layout found by inspecting the modules
    (warned about once per class unless ``warn`` is False, as when a model is only being checked
    before it is refused; :func:`describe_architecture` records it in summaries)."""
    known = LAYOUTS.get(type(model).__name__)
    if known is not None:
        return known
    layout = _infer_layout(model)
    if warn and type(model).__name__ not in _WARNED:
        _WARNED.add(type(model).__name__)
        warnings.warn(
            f"{type(model).__name__} is not in sinklab's layout table; using the inferred {_describe(layout)}", stacklevel=2
        )
    return layout


_WARNED: set[str] = set()


def describe_architecture(model: nn.Module) -> str:
    """The model's class, and the inferred layout when it is not in :data:`LAYOUTS`."""
    name = type(model).__name__
    return name if name in LAYOUTS else f"{name} ({_describe(layout_of(model))})"


def _describe(layout: Layout) -> str:
    return f"layout guessed: layers {layout.layers}, FFN down projection {layout.down_proj or 'none'}"


def _infer_layout(model: nn.Module) -> Layout:
    """Generic fallback: the ModuleList with one entry per layer, and its MLP's last projection."""
    n_layers = getattr(model.config, "num_hidden_layers", None)
    lists = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.ModuleList) and len(m) == n_layers]
    if not lists:
        raise SinklabError(
            f"cannot find the decoder layers of {type(model).__name__}; add it to sinklab.models.hf.layouts.LAYOUTS"
        )
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
    return get_submodule(model, layout_of(model).layers)


def down_proj_weight(model: nn.Module, layer: int) -> Optional[torch.Tensor]:
    """(d_model, I): column n is what FFN neuron n writes into the residual stream."""
    path = layout_of(model).down_proj
    if not path:
        return None
    proj = get_submodule(decoder_layers(model)[layer], path)
    weight = stored_parameter(proj, "weight").detach()  # an offloaded layer's is on meta
    return weight if isinstance(proj, nn.Linear) else weight.T  # GPT-2's Conv1D stores (in, out)
