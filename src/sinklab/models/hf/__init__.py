"""All coupling to Hugging Face transformers: loading (:mod:`.loading`), where each architecture
keeps its layers (:mod:`.layouts`), and instrumentation with sinklab's hook names
(:mod:`.instrument`). A new architecture is one line in ``layouts.LAYOUTS``."""

from .instrument import QUERY_CHUNK, head_nll, instrument, output_logits, token_nll
from .layouts import LAYOUTS, Layout, decoder_layers, describe_architecture, down_proj_weight, layout_of
from .loading import DEFAULT_MODEL, LoadedModel, cache_root, default_gguf_path, dequantised_dir, load_model

__all__ = [
    "DEFAULT_MODEL",
    "LAYOUTS",
    "QUERY_CHUNK",
    "Layout",
    "LoadedModel",
    "cache_root",
    "decoder_layers",
    "describe_architecture",
    "default_gguf_path",
    "dequantised_dir",
    "down_proj_weight",
    "head_nll",
    "instrument",
    "layout_of",
    "load_model",
    "output_logits",
    "token_nll",
]
