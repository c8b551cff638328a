"""What sinklab can measure: a causal decoder whose logits are its output layer applied to the final
hidden states. Anything else is refused in one line, before a forward runs.

Causality is read from what the model says of itself, never from its class or ``model_type``: the
``is_causal`` flag of the attention modules inside its layers (what transformers' own attention
functions read when a model passes no mask), else its config's ``is_decoder``; an encoder-decoder
config is refused outright. sinklab's metrics (the first-token mass over the keys a query sees,
the next-token loss, the sink cache) assume causal attention, and a mask it imposed on a
bidirectional model would silently change that model's outputs (a BERT under a causal mask).
"""

from __future__ import annotations

from typing import Optional

from torch import nn

from ...core.errors import SinklabError
from .layouts import get_submodule, layout_of


def check_causal(model: nn.Module, name: Optional[str] = None) -> None:
    """Refuse a model whose layers do not attend causally, or that does not say whether they do
    (``name``: what the user called it, named in the error beside its class)."""
    label = _label(model, name)
    config = model.config
    if getattr(config, "is_encoder_decoder", False):
        raise SinklabError(f"{label} is an encoder-decoder model; sinklab measures causal decoders only")
    flags = {path: module.is_causal for path, module in _attention_flags(model)}
    not_causal = [path for path, causal in flags.items() if not causal]
    if not_causal:
        decoder = getattr(config, "is_decoder", None)
        said = f"; its config has is_decoder={decoder}" if decoder is not None else ""
        raise SinklabError(
            f"{label} does not attend causally ({not_causal[0]} has is_causal=False{said}): "
            "sinklab measures causal decoders only, and a causal mask imposed on it would change its outputs"
        )
    if not flags and getattr(config, "is_decoder", None) is not True:
        raise SinklabError(
            f"{label} does not say whether it attends causally (no attention module has is_causal, "
            "and its config does not set is_decoder=True); sinklab measures causal decoders only"
        )


def check_supported(model: nn.Module, name: Optional[str] = None) -> None:
    """Everything :func:`check_causal` refuses, a model without a language-model head (a base
    model such as ``BertModel`` or ``LlamaModel``), and one whose head does more than its output
    layer (sinklab's next-token loss is the output layer applied to the final hidden states, so a
    transform between them, as in BERT's ``cls.predictions``, would make that loss silently wrong).
    Also finds the layers, warning where their layout is guessed."""
    label = _label(model, name)
    check_causal(model, name)
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if output is None:
        raise SinklabError(f"{label} has no language-model head (a base model?): load it with transformers.AutoModelForCausalLM")
    if not any(child is output for child in model.children()):
        path = next(name for name, module in model.named_modules() if module is output)
        raise SinklabError(
            f"{label}: its head {path.split('.')[0]} does more than its output layer {path}; sinklab computes the next-token "
            "loss as the output layer applied to the final hidden states, which would be wrong here"
        )
    layout_of(model)


def _label(model: nn.Module, name: Optional[str]) -> str:
    cls = type(model).__name__
    return cls if name in (None, "", cls) else f"{name} ({cls})"


def _attention_flags(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(path, module) of every module inside the decoder layers that carries a boolean ``is_causal``."""
    layers_path = layout_of(model, warn=False).layers
    layers = get_submodule(model, layers_path)
    return [
        (f"{layers_path}.{path}", module)
        for path, module in layers.named_modules()
        if isinstance(getattr(module, "is_causal", None), bool)
    ]
