"""Causal edits of attention, one file each: create, move and remove sinks (Li et al. 2026; Xiao et al. 2024).

Each intervention is a frozen dataclass that turns into hooks on the named hook points, so the
same value edits a Hugging Face model, a native LM or a trigger-lab model. Hooks only exist
inside :meth:`~sinklab.core.hooks.HookSet.attached` (used by the runner), and every intervention
is recorded in the run's config through its dataclass fields.

A new intervention is one file in this package, imported below (the imports' order is the order
of :data:`INTERVENTIONS`, so of the runs and of the flags in ``sinklab intervene --help``): a
frozen dataclass subclass of :class:`~sinklab.intervene.Intervention` with ``point``, ``edit``
and ``label``, decorated with ``@register(option, takes=..., help=...)``
(:func:`~sinklab.intervene.register`) and saying in ``for_option`` which interventions its
command-line option asks for. ``sinklab intervene --option`` (from ``help`` and ``takes``), the
runner and the report pick it up from :data:`INTERVENTIONS`. The notebook and the configuration
take the values themselves (``intervene_model(model, tok, [MaskSelf(10)])``, as
:func:`sinklab.applied` does); only the command line speaks in options.

``layers`` / ``heads`` select where an intervention acts (None: everywhere) and are keyword-only;
the fields of each intervention come first and may be positional (``MaskSelf(10)``,
``VarianceAmplify(5, 4.0)``, ``ScoreBias((0,), -inf, layers=(2,))``). Positions are 0-indexed
absolute token positions of the input (position 0 is the BOS token when one is prepended); with a
KV cache an edit at position k acts in the step that computes position k.
"""

from .base import BY_TYPE, INTERVENTIONS, TAKES, Intervention, register

# isort: off
from .mask_self import MaskSelf
from .variance_amplify import MU_DEFINITION, VarianceAmplify
from .plain_scale import PlainScale
from .score_bias import ScoreBias, suppress_sink
from .value_zero import ValueZero
from .drop_first import DropFirst

# isort: on

__all__ = [
    "BY_TYPE",
    "INTERVENTIONS",
    "MU_DEFINITION",
    "TAKES",
    "DropFirst",
    "Intervention",
    "MaskSelf",
    "PlainScale",
    "ScoreBias",
    "ValueZero",
    "VarianceAmplify",
    "register",
    "suppress_sink",
]
