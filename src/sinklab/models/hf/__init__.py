"""All coupling to Hugging Face transformers: loading (:mod:`.loading`; devices and dtypes in
:mod:`.placement`, GGUF files in :mod:`.dequantise`), where each architecture
keeps its layers (:mod:`.layouts`), instrumentation with sinklab's hook names
(:mod:`.instrument`), and what sinklab refuses to measure (:mod:`.support`: anything but a causal
decoder with a plain output layer). A new architecture is one line in ``layouts.LAYOUTS``."""

from .dequantise import cache_root, default_gguf_path, default_model_folder, dequantised_dir
from .instrument import QUERY_CHUNK, evicted_tokens, head_nll, instrument, output_logits, token_nll
from .layouts import LAYOUTS, Layout, decoder_layers, describe_architecture, down_proj_weight, layout_of
from .loading import (
    DEFAULT_MODEL,
    MODEL_FACTS,
    MODEL_HELP,
    LoadedModel,
    LoadOptions,
    ModelHeader,
    head_dim_of,
    input_device,
    load_model,
    model_facts,
    read_header,
    resolved_config,
)
from .placement import DTYPES, check_device_map, device_name, execution_device, resolve_device, resolve_dtype
from .support import check_causal, check_supported

__all__ = [
    "DEFAULT_MODEL",
    "DTYPES",
    "MODEL_FACTS",
    "MODEL_HELP",
    "LAYOUTS",
    "QUERY_CHUNK",
    "Layout",
    "LoadOptions",
    "LoadedModel",
    "ModelHeader",
    "cache_root",
    "check_causal",
    "check_device_map",
    "check_supported",
    "decoder_layers",
    "describe_architecture",
    "default_gguf_path",
    "default_model_folder",
    "dequantised_dir",
    "head_dim_of",
    "device_name",
    "evicted_tokens",
    "down_proj_weight",
    "head_nll",
    "execution_device",
    "input_device",
    "instrument",
    "layout_of",
    "load_model",
    "model_facts",
    "output_logits",
    "read_header",
    "resolve_device",
    "resolve_dtype",
    "resolved_config",
    "token_nll",
]
