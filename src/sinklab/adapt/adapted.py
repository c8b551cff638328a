"""A pretrained model with a mitigation, run on content without BOS (see :mod:`.mitigations`).

The mitigation enters through the attention route the scanner uses: sinklab's attention function
(:func:`~sinklab.models.hf.instrument`) with the mitigation's normalisation, a hook on each
head's output (``attn.hook_z``) and, while BOS fades out, a hook shifting BOS's score column. No
model file is forked, and every probe on the same hook names sees the adapted attention.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator, Optional

import torch
from torch import nn

from ..core.hooks import HookSet, hook_name
from ..models.hf import decoder_layers, instrument, output_logits
from .mitigations import Mitigation
from .prefix import SinkPrefix


class AdaptedModel:
    """``model`` with ``mitigation``; BOS (``bos``, a one-token prefix) enters only as a cache."""

    def __init__(self, model: nn.Module, mitigation: Mitigation, bos: SinkPrefix) -> None:
        self.model, self.mitigation, self.bos = model, mitigation, bos
        self.hooks = HookSet()

    def prefix(self) -> Optional[SinkPrefix]:
        """The cached prefix the content runs after (none once BOS has faded out completely)."""
        if self.mitigation.fades_bos and self.mitigation.ramp >= 1:
            return None
        return self.mitigation.prefix(self.bos)

    @contextmanager
    def applied(self) -> Iterator["AdaptedModel"]:
        """Route attention through the mitigation; hooks on its ``hooks`` see the adapted model."""
        inputs: dict[int, torch.Tensor] = {}
        handles = [
            layer.register_forward_pre_hook(_keep_input(inputs, i), with_kwargs=True)
            for i, layer in enumerate(decoder_layers(self.model))
        ]
        edits = [
            (hook_name("*", "attn.hook_z"), lambda z, point: self.mitigation.head_output(point.layer, z, inputs[point.layer]))
        ]
        if self.mitigation.fades_bos and 0 < self.mitigation.ramp < 1:
            edits.append((hook_name("*", "attn.hook_scores"), self._fade_bos))
        try:
            with instrument(self.model, self.hooks, query_chunk=None, norms=self.mitigation.norms()), self.hooks.attached(edits):
                yield self
        finally:
            for handle in handles:
                handle.remove()

    def _fade_bos(self, scores: torch.Tensor, point) -> torch.Tensor:
        """BOS's column (key 0, the prefix) weighted by 1 - ramp."""
        shift = math.log1p(-self.mitigation.ramp)
        return torch.cat([scores[..., :1] + shift, scores[..., 1:]], dim=-1)

    def hidden(self, content: torch.Tensor) -> torch.Tensor:
        """Final hidden states (B, T, d) of the content (call inside :meth:`applied`)."""
        prefix = self.prefix()
        cache = prefix.cache(self.model, content.shape[0]) if prefix is not None else None
        return self.model.base_model(
            input_ids=content.to(self.model.device), cache=cache, use_cache=cache is not None
        ).last_hidden_state

    def logits(self, content: torch.Tensor) -> torch.Tensor:
        return output_logits(self.model, self.hidden(content))


def _keep_input(inputs: dict, layer: int):
    def hook(module, args, kwargs):
        inputs[layer] = args[0] if args else kwargs["hidden_states"]

    return hook
