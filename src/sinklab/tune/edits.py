"""Two attention edits that use the sink to raise accuracy without training.

* :class:`InitialTokenScale` follows ZeroTuning (Han et al., ICLR 2026, arXiv 2505.11739): the
  attention each head pays the initial token is a lever; scaling it by a per-head gamma and
  renormalising the row sharpens (gamma < 1) or flattens (gamma > 1) the rest of the row.
* :class:`SinkCalibration` follows ACT, the attention calibration technique (Yu et al., ICML 2024,
  arXiv 2406.15765; GATECH-EIC/ACT): tokens after the first that draw much attention are "hidden"
  sinks that waste it; their weight is cut to ``beta`` and given back to the other keys.

Neither is a ``sinklab intervene`` option; both work inside :func:`sinklab.applied` and
are recorded as every intervention is (``to_record`` / ``Intervention.from_record``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Optional

import torch

from ..core.attention import causal_mask
from ..core.errors import SinklabError, check
from ..core.hooks import PROMPT_UNKNOWN, HookFn, HookSite, hook_name
from ..intervene import Intervention, recordable
from . import formulas


def _layers_label(layers: Optional[tuple[int, ...]]) -> str:
    if layers is None:
        return "all layers"
    return f"layer {layers[0]}" if len(layers) == 1 else "layers " + ",".join(str(layer) for layer in layers)


@recordable
@dataclass(frozen=True)
class InitialTokenScale(Intervention):
    """ZeroTuning (Han et al., ICLR 2026, arXiv 2505.11739): head h's attention to the initial
    token (key 0) times ``gammas[h]``, each row renormalised::

        a0' = g a0 / ((g - 1) a0 + 1),     ai' = ai / ((g - 1) a0 + 1)

    which for softmax attention is exactly log(g) added to key 0's pre-softmax score, the edit made
    here (``attn.hook_scores``; another normalisation receives the same score shift). Why: the
    initial token is a sink whose share sets how sharp the rest of the row is, so tuning one
    number per head steers attention without touching a weight. gamma = 1 leaves the head
    bit-for-bit untouched. Column 0 is key 0 in every row, in row chunks and under a KV cache;
    masked (-inf) scores stay -inf. One instance per layer (``layers=(3,)``; None: every layer
    with the same gammas), one gamma per attention head.
    """

    gammas: tuple[float, ...]
    point: ClassVar[str] = "attn.hook_scores"

    def __post_init__(self) -> None:
        given = self.gammas if isinstance(self.gammas, (tuple, list)) else (self.gammas,)
        check(len(given) >= 1, "InitialTokenScale needs one gamma per head, got none")
        for gamma in given:
            check(
                isinstance(gamma, (int, float)) and math.isfinite(gamma) and gamma > 0,
                f"InitialTokenScale: every gamma must be a positive finite number, got {gamma!r}",
            )
        object.__setattr__(self, "gammas", tuple(float(g) for g in given))

    @property
    def label(self) -> str:
        return f"initial_token_scale {_layers_label(self.layers)}"

    @property
    def reported_position(self) -> int:
        return 0  # the token whose share it scales

    def validate(self, n_layers: int, n_heads: int, n_tokens: Optional[int]) -> None:
        super().validate(n_layers, n_heads, n_tokens)
        check(
            len(self.gammas) == n_heads,
            f"InitialTokenScale: {len(self.gammas)} gamma(s) given, but the model has {n_heads} heads (one gamma per head)",
        )

    def edit(self, scores: torch.Tensor, where: HookSite) -> torch.Tensor:
        logs = [math.log(g) for g in self.gammas]
        if not any(logs):
            return scores  # gamma = 1 everywhere: not even a + 0.0
        return formulas.scale_initial(scores, torch.tensor(logs, device=scores.device))


@recordable
@dataclass(frozen=True)
class SinkCalibration(Intervention):
    """ACT (Yu et al., ICML 2024, arXiv 2406.15765): in the selected heads, a token whose attention,
    averaged over the query rows that can see it, exceeds ``threshold`` is a sink of this input;
    one is spared (``spare``: the first token, or the first sink found as the paper's code does,
    :data:`~.formulas.SPARE_RULES`), the others' weights are multiplied by ``beta`` and each row's
    removed mass goes to that row's other keys in proportion to their weights, so rows still sum to
    1. Why: such hidden sinks draw attention that carries little, and calibrating it away raises
    accuracy without training. A row with no other weight is left alone. Where the input is a
    prompt followed by an answer being scored (:func:`~sinklab.core.hooks.scoring_after`: sinklab's
    multiple-choice judges), the sinks are found on the prompt's rows only, so every choice of a
    question is calibrated alike, and the calibration applies to every row.

    Departures from the paper's code (GATECH-EIC/ACT): ``spare="first_token"`` (the default) spares
    position 0 even where it is not a sink (the code spares the first sink it finds:
    ``spare="first_sink"``); any layer may be chosen (the code's search skips the first two layers
    and the last: ``sinklab tune --act-layers official``, the default there); every sequence of a
    batch is calibrated (the code calibrates the first).

    Input-adaptive: the sinks are found per sequence and head from the pattern at hand, which must
    be whole: pass ``query_chunk=None`` to :func:`~sinklab.applied` for inputs longer
    than its query chunk (a pattern in row chunks is refused). A query row is real where it sees
    itself (a right-padded row does not), from the mask at ``attn.hook_mask`` of the same layer
    as this edit's hook receives it. Under a KV cache a decoding step holds one row: its sinks
    are the keys that row gives more than ``threshold``.
    """

    beta: float = 0.4
    threshold: float = 0.1
    spare: str = "first_token"
    point: ClassVar[str] = "attn.hook_pattern"
    #: A judge must tell it where each request's prompt ends (batch size 1 in lm-eval).
    reads_prompt_rows: ClassVar[bool] = True

    def __post_init__(self) -> None:
        for name, value, low_open in (("beta", self.beta, False), ("threshold", self.threshold, True)):
            ok = isinstance(value, (int, float)) and (0 < value <= 1 if low_open else 0 <= value <= 1)
            check(ok, f"SinkCalibration: {name} must be in {'(0, 1]' if low_open else '[0, 1]'}, got {value!r}")
        check(
            self.spare in formulas.SPARE_RULES,
            f"SinkCalibration: spare must be one of {', '.join(formulas.SPARE_RULES)}, got {self.spare!r}",
        )

    @property
    def label(self) -> str:
        spared = "" if self.spare == "first_token" else f" spare={self.spare}"
        return f"act beta={self.beta:g} thr={self.threshold:g}{spared}"

    @property
    def reported_position(self) -> int:
        return 0  # the sink it keeps while calibrating the others

    def hooks(self, n_heads: int) -> list[tuple[str, HookFn]]:
        """The mask hook of each selected layer (keeps the mask for the pattern, unchanged) and
        its pattern hook (the edit)."""
        layers = self.layers if self.layers is not None else ("*",)
        masks: dict[int, tuple[int, torch.Tensor]] = {}

        def keep(mask: torch.Tensor, where: HookSite) -> None:
            masks[where.layer] = (where.q_start, mask)

        def apply(pattern: torch.Tensor, where: HookSite) -> torch.Tensor:
            q_start, mask = masks.pop(where.layer, (None, None))
            if q_start != where.q_start:
                raise RuntimeError(f"SinkCalibration: no mask of {where.name}'s rows from {where.q_start} was seen")
            edited = self.edit(pattern, where, mask)
            return edited if self.heads is None else self._on_selected_heads(pattern, edited, n_heads)

        return [
            hook
            for layer in layers
            for hook in ((hook_name(layer, "attn.hook_mask"), keep), (hook_name(layer, self.point), apply))
        ]

    def edit(self, pattern: torch.Tensor, where: HookSite, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``pattern`` (B, H, Tq, Tk') calibrated; ``mask`` (B|1, H|1, Tq, Tk) the rows' visibility
        (None: causal, the queries the last Tq of the keys)."""
        n_rows = pattern.shape[-2]
        n_keys = where.n_keys if where.n_keys is not None else (mask.shape[-1] if mask is not None else pattern.shape[-1])
        if where.q_start + n_rows != n_keys:
            raise SinklabError(
                f"SinkCalibration (ACT) needs each layer's whole attention pattern, but {where.name} arrived in row chunks "
                f"(rows {where.q_start}..{where.q_start + n_rows - 1} of {n_keys}); pass query_chunk=None to applied()"
            )
        if where.prompt_end == PROMPT_UNKNOWN:
            raise SinklabError(
                "SinkCalibration (ACT) finds the sinks on a request's prompt rows, but the judge could not tell this "
                "request's prompt from its answer (several requests in one batch, or a prompt cut to the model's "
                "positions): judge it at batch size 1 (sinklab.accuracy.lm_for(model, tokenizer, batch_size=1))"
            )
        if mask is None:
            mask = causal_mask(n_rows, n_keys, pattern.device)
        strength = torch.full((pattern.shape[1],), 1.0 - self.beta, device=pattern.device)
        sinks = formulas.sinks_of(pattern, mask, where.q_start, self.threshold, where.prompt_end, self.spare)
        return formulas.calibrate(pattern, sinks, strength)
