"""TWEO (Liang et al. 2025, arXiv 2511.23225), an auxiliary loss against extreme activations:
the mean over blocks of mean((|A| / (tau + eps))^p), where A is a block's output (the residual
stream after it), tau a soft threshold (3) and p a power (4) that leaves activations under tau
almost free and grows fast past it. ``sinklab pretrain --tweo [WEIGHT]`` adds WEIGHT (0.01) times it
to the language-model loss; metrics.jsonl reports the two apart (``train_loss`` is the LM loss).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from ..core.hooks import hook_name
from ..models.native import Transformer

#: Added to tau in the penalty's denominator, as the paper does, for numerical safety.
EPS = 1e-6


def tweo_penalty(block_outputs: list[torch.Tensor], tau: float, p: float) -> torch.Tensor:
    """TWEO's penalty over the blocks' outputs (each (B, T, d_model)), averaged over blocks."""
    return torch.stack([(a.float().abs() / (tau + EPS)).pow(p).mean() for a in block_outputs]).mean()


@contextmanager
def block_outputs(model: Transformer) -> Iterator[list[torch.Tensor]]:
    """Collect every block's output of the forward passes inside the block, in order."""
    outputs: list[torch.Tensor] = []
    with model.hooks.attached([(hook_name("*", "hook_resid_post"), lambda x, point: outputs.append(x))]):
        yield outputs
