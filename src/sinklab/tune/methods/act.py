"""ACT, the attention calibration technique (Yu et al., ICML 2024, arXiv 2406.15765;
GATECH-EIC/ACT): in chosen heads, keys after the first that draw more than ``threshold`` of the
mean attention are sinks, and ``1 - beta`` of their attention goes back to the other keys.

The search: the heads where calibrating helps the validation objective most (positive profile),
within the layers ACT may calibrate, calibrated at the paper's beta, their count chosen on
validation. Its sinks are read from each head's whole pattern, so its forwards attend every query
row at once and lm-eval judges one example at a time (no padded rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ...core.errors import check
from ...core.hooks import hook_name
from .. import formulas
from ..edits import SinkCalibration
from .base import Tuning, register_tuning

#: ACT's defaults as the paper's code runs it (BETA=0.4, THRES=0.1).
ACT_BETA = 0.4
ACT_THRESHOLD = 0.1
#: ACT's head counts tried on validation.
ACT_COUNTS = (4, 8, 16, 32)
#: The layers ACT may calibrate, of a model's n: ``official`` as GATECH-EIC/ACT's search (every layer
#: but the first two and the last), ``all``.
ACT_LAYER_RANGES: dict[str, Callable[[int], Sequence[int]]] = {"official": lambda n: range(2, n - 1), "all": range}


@register_tuning("act")
@dataclass(frozen=True)
class ACT(Tuning):
    """The (layer, head) pairs whose sinks after the first token are calibrated."""

    heads: tuple[tuple[int, int], ...]
    beta: float = ACT_BETA
    threshold: float = ACT_THRESHOLD
    spare: str = "first_token"  # which sink is kept (formulas.SPARE_RULES); older tunings kept the first token

    help = "act (Yu et al. 2024): sinks after the first token calibrated in chosen heads"
    strength_label = "ACT's calibration strength (1 - beta)"
    ablation_strength = 1 - ACT_BETA
    whole_rows = True
    settings = ("act_layers", "act_spare")
    v1_settings = {"act_layers": "all"}  # version 1 calibrated every layer

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", tuple(sorted((int(layer), int(head)) for layer, head in self.heads)))
        SinkCalibration(beta=self.beta, threshold=self.threshold, spare=self.spare)  # refuses what is out of range

    @classmethod
    def options(cls, cfg: Any) -> dict:
        return {"layer_range": cfg.act_layers, "spare": cfg.act_spare}

    @classmethod
    def untouched(cls, layers: int, heads: int) -> "ACT":
        return cls(())

    @property
    def scaled(self) -> int:
        return len(self.heads)

    def edits(self) -> list:
        by_layer: dict[int, list[int]] = {}
        for layer, head in self.heads:
            by_layer.setdefault(layer, []).append(head)
        return [
            SinkCalibration(beta=self.beta, threshold=self.threshold, spare=self.spare, layers=(layer,), heads=tuple(heads))
            for layer, heads in sorted(by_layer.items())
        ]

    @classmethod
    def editable_layers(cls, layers: int, options: dict) -> Sequence[int]:
        return ACT_LAYER_RANGES[options.get("layer_range", "official")](layers)

    @classmethod
    def check_model(cls, layers: int, options: dict) -> None:
        check(
            len(cls.editable_layers(layers, options)) > 0,
            f"--act-layers {options['layer_range']} leaves none of the model's {layers} layers to calibrate "
            "(official: all but the first two and the last); pass --act-layers all",
        )

    @classmethod
    def strength_hooks(cls, strength: torch.Tensor, options: dict) -> list:
        """1 - beta per (layer, head): each layer's mask kept, then its pattern calibrated."""
        threshold, spare = options.get("threshold", ACT_THRESHOLD), options.get("spare", "first_token")
        masks: dict = {}
        hooks = []
        for layer in range(strength.shape[0]):
            hooks.append((hook_name(layer, "attn.hook_mask"), _kept(masks, layer)))
            hooks.append((hook_name(layer, "attn.hook_pattern"), _calibrated(masks, layer, strength[layer], threshold, spare)))
        return hooks

    @classmethod
    def candidates(cls, profile: torch.Tensor, options: dict) -> list[tuple[str, Tuning]]:
        """ACT on the top n heads of the layers ``layer_range`` allows (:data:`ACT_LAYER_RANGES`)
        where calibration helps (positive profile), n in :data:`ACT_COUNTS`, each keeping the sink
        ``spare`` names."""
        layers, heads = profile.shape
        allowed = cls.editable_layers(layers, options)
        flat = profile.flatten()
        helpful = [i for i in flat.argsort(descending=True).tolist() if flat[i] > 0 and i // heads in allowed]
        out: list[tuple[str, Tuning]] = []
        for n in ACT_COUNTS:
            if n > len(helpful) and out:
                break
            picked = helpful[:n]
            if picked:
                chosen = tuple(divmod(i, heads) for i in picked)
                out.append((f"ACT on {len(picked)} heads", cls(chosen, spare=options.get("spare", "first_token"))))
        return out


def _kept(masks: dict, layer: int) -> Callable:
    def keep(mask, where):
        masks[layer] = mask
        return mask

    return keep


def _calibrated(masks: dict, layer: int, strength: torch.Tensor, threshold: float, spare: str) -> Callable:
    def edit(pattern, where):
        sinks = formulas.sinks_of(pattern.detach(), masks[layer], where.q_start, threshold, where.prompt_end, spare)
        return formulas.calibrate(pattern, sinks, strength)

    return edit
