"""Changing a pretrained model's sink: the first token as a cached prefix (:mod:`.prefix`), the
quantization payoff of taking it out of the stream (:mod:`.quantize`, :mod:`.evaluate`), a search
for prefix tokens that absorb outliers (:mod:`.search`), and mitigations fine-tuned into the
model (:mod:`.mitigations`, :mod:`.adapted`, :mod:`.finetune`, :mod:`.finetuned`, :mod:`.probe`)."""

from .adapted import AdaptedModel
from .evaluate import Evaluation, corpus_windows
from .finetune import FINETUNE, FinetuneConfig
from .finetuned import load_adapted
from .frame import adapt_rows
from .mitigations import MITIGATIONS, Mitigation
from .prefix import SinkPrefix, bos_token
from .quantize import QUANT_SCHEMES, QuantScheme, fake_quant, quantize_activation, quantize_weight, quantized
from .run import ADAPT, PrefixConfig

__all__ = [
    "ADAPT",
    "FINETUNE",
    "MITIGATIONS",
    "Evaluation",
    "AdaptedModel",
    "FinetuneConfig",
    "Mitigation",
    "QUANT_SCHEMES",
    "PrefixConfig",
    "QuantScheme",
    "SinkPrefix",
    "adapt_rows",
    "bos_token",
    "corpus_windows",
    "fake_quant",
    "load_adapted",
    "quantize_activation",
    "quantize_weight",
    "quantized",
]
