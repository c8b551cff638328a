"""The two tunings' attention edits as tensor formulas, per head, differentiable in their strength:
the edits of :mod:`.edits` apply them with fixed values, the profile (:mod:`.profile`) takes their
derivative at the identity.

* :func:`scale_initial` (ZeroTuning, Han et al., ICLR 2026): the initial token's attention weight
  scaled by gamma and the row renormalised, a0' = g a0 / ((g - 1) a0 + 1) and ai' = ai / ((g - 1) a0 + 1),
  which for softmax is exactly log g added to key 0's pre-softmax score.
* :func:`sinks_of` and :func:`calibrate` (ACT, Yu et al., ICML 2024): keys that receive more than
  ``threshold`` attention on average over the real query rows that see them (the prompt's rows,
  where the input is a prompt and an answer being scored) are this input's sinks, one spared (the
  first token, or as the paper's code does the first sink found: :data:`SPARE_RULES`); their
  weights are scaled by beta = 1 - strength and each row's removed mass goes to its other keys in
  proportion to their weights.
"""

from __future__ import annotations

from typing import Optional

import torch

#: Which sink ACT keeps: ``first_token`` (sinklab's: position 0, whether or not it is a sink, so
#: every other sink is calibrated) or ``first_sink`` (GATECH-EIC/ACT's code: the first sink found,
#: which is position 0 where it is a sink).
SPARE_RULES = ("first_token", "first_sink")


def scale_initial(scores: torch.Tensor, log_gamma: torch.Tensor) -> torch.Tensor:
    """``scores`` (B, H, Tq, Tk) with ``log_gamma`` (H,) added to key 0 in every row (log 1 = 0.0
    leaves a head exact; masked -inf scores stay -inf)."""
    first = scores[..., :1] + log_gamma.to(scores.dtype).view(1, -1, 1, 1)
    return torch.cat([first, scores[..., 1:]], dim=-1)


def sinks_of(
    pattern: torch.Tensor,
    mask: torch.Tensor,
    q_start: int,
    threshold: float,
    prompt_end: Optional[int] = None,
    spare: str = "first_token",
) -> torch.Tensor:
    """(B, H, Tk') bool: ACT's sinks of this input, less the one :data:`SPARE_RULES` ``spare`` keeps.
    ``pattern`` (B, H, Tq, Tk') holds rows from absolute position ``q_start``; ``mask`` (B|1, H|1,
    Tq, Tk) their visibility. A row is real where it sees its own key (a right-padded row does not,
    when the caller passes a padding mask; lm-eval passes none, hence ACT at batch size 1 there) and,
    given ``prompt_end``, lies in the prompt (rows of an answer being scored would make each choice
    find other sinks); each key's mean is over the real rows that see it (GATECH-EIC/ACT divides by
    the rows at or after the key, the same count in a causal, unpadded input)."""
    n_rows, width = pattern.shape[-2:]
    rows = torch.arange(n_rows, device=pattern.device)
    own = q_start + rows
    real = mask[..., rows, own.clamp(max=mask.shape[-1] - 1)] & (own < mask.shape[-1])  # (B|1, H|1, Tq)
    if prompt_end is not None:
        real = real & (own < prompt_end)
    seen = mask[..., :width] & real.unsqueeze(-1)
    count = seen.sum(-2)
    mean = torch.where(seen, pattern, 0.0).sum(-2) / count.clamp(min=1)
    sinks = (mean > threshold) & (count > 0)
    if spare == "first_token":
        sinks[..., 0] = False
    else:  # the first sink found, whichever position it is
        first = sinks.int().argmax(-1, keepdim=True)  # 0 where there is none: nothing to clear
        sinks.scatter_(-1, first, False)
    return sinks


def calibrate(pattern: torch.Tensor, sinks: torch.Tensor, strength: torch.Tensor) -> torch.Tensor:
    """``pattern`` (B, H, Tq, Tk') with ``sinks`` (B, H, Tk') scaled by 1 - ``strength`` (H,) and each
    row's removed mass given to its other keys by their weights; a row with no weight outside the
    sinks is left as it is, and so is a pattern with no sink (exactly)."""
    if not bool(sinks.any()):
        return pattern
    on_sink = sinks.unsqueeze(-2)  # (B, H, 1, Tk')
    s = strength.to(pattern.dtype).view(1, -1, 1, 1)
    sunk = torch.where(on_sink, pattern, 0.0).sum(-1, keepdim=True)
    rest = torch.where(on_sink, 0.0, pattern).sum(-1, keepdim=True)
    spare = rest > 0
    factor = 1 + s * sunk / torch.where(spare, rest, 1.0)  # exactly 1 in a row without sinks
    edited = torch.where(on_sink, (1 - s) * pattern, pattern * factor)
    return torch.where(spare, edited, pattern)
