"""Attention variants: normalisations (a registry), per-head extras, and the reference kernel.

* a new normalisation: a subclass of :class:`AttnNorm` decorated with ``@register("name")`` in
  :mod:`.norms`;
* a new per-head extra: a module plus an entry in :data:`HEAD_EXTRAS` in :mod:`.extras`.
"""

from .extras import EXTRA_NAMES, HEAD_EXTRAS, AttentionSpec, HeadOutput, extras_off, with_extras_off
from .norms import ATTN_NORMS, AttnNorm, check_attn_name, make_norm, register
from .reference import attend, attend_fast, causal_mask, default_scale

__all__ = [
    "ATTN_NORMS",
    "EXTRA_NAMES",
    "HEAD_EXTRAS",
    "AttentionSpec",
    "AttnNorm",
    "HeadOutput",
    "attend",
    "attend_fast",
    "causal_mask",
    "check_attn_name",
    "default_scale",
    "extras_off",
    "make_norm",
    "register",
    "with_extras_off",
]
