"""What a tuning method is: one class per method, registered by name, that ``sinklab tune``
profiles, searches and judges, and that ``sinklab.applied`` applies.

A method's class is a frozen dataclass whose instances are tunings (the values a search returns,
saved as JSON by their fields). The class says how the run treats it, so that no module outside
its own file branches on which method it is:

* :meth:`Tuning.edits`: the interventions it puts on a model (:mod:`sinklab.tune.edits` holds the
  built-in ones); ``whole_rows``: whether they read each head's whole attention pattern (the
  forwards then attend every query row at once, and lm-eval judges one example at a time);
* :meth:`Tuning.untouched`: the tuning that edits nothing (the search's first candidate);
* :meth:`Tuning.strength_hooks`: the hooks that apply it with a per-(layer, head) strength,
  differentiably (0 = untouched), which the head profile differentiates or sets one head at a
  time at ``ablation_strength``;
* :meth:`Tuning.candidates`: the tunings its search tries on the validation split, from a profile;
* ``settings``: the ``sinklab tune`` settings it reads (refused with another method), and
  :meth:`Tuning.options`, what it makes of them.

A new method is one file in this package, imported in its ``__init__`` (the recipe: docs,
Contributing, "A tuning method").
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Sequence

import torch

from ...core.errors import check

#: Every tuning method by name (``sinklab tune --method``, the ``method`` of a saved tuning).
TUNINGS: dict[str, type["Tuning"]] = {}


def register_tuning(name: str) -> Callable[[type], type]:
    """Class decorator: make a tuning method known by ``name``."""

    def add(cls: Any) -> Any:
        check(name not in TUNINGS, f"tuning method {name!r} is registered twice")
        cls.method = name
        TUNINGS[name] = cls
        return cls

    return add


class Tuning:
    """The base of every tuning method (see the module's docstring); a subclass is a frozen dataclass."""

    #: Its registered name (set by :func:`register_tuning`).
    method: ClassVar[str] = ""
    #: ``--method``'s help for it: what it edits, and its paper.
    help: ClassVar[str] = ""
    #: What its profile's strength is, for the profile's figure.
    strength_label: ClassVar[str] = ""
    #: The strength each head is edited at, alone, in the papers' one-head-at-a-time profile.
    ablation_strength: ClassVar[float] = 0.0
    #: Whether its edits read each head's whole attention pattern.
    whole_rows: ClassVar[bool] = False
    #: The ``sinklab tune`` settings it reads (at their defaults with any other method).
    settings: ClassVar[tuple[str, ...]] = ()
    #: Its settings as a version-1 ``tune`` configuration ran it (the configuration's migration).
    v1_settings: ClassVar[dict] = {}

    @classmethod
    def options(cls, cfg: Any) -> dict:
        """What its profile and search take from ``sinklab tune``'s configuration ``cfg``."""
        return {}

    @classmethod
    def untouched(cls, layers: int, heads: int) -> "Tuning":
        """The tuning of this method that edits nothing."""
        raise NotImplementedError

    @classmethod
    def strength_hooks(cls, strength: torch.Tensor, options: dict) -> list:
        """(hook name, function) pairs applying the method with per-(layer, head) ``strength``
        (L, H), differentiably in it; 0 leaves a head untouched."""
        raise NotImplementedError

    @classmethod
    def candidates(cls, profile: torch.Tensor, options: dict) -> list[tuple[str, "Tuning"]]:
        """(label, tuning) pairs its search tries on validation, from the (L, H) ``profile``."""
        raise NotImplementedError

    @classmethod
    def editable_layers(cls, layers: int, options: dict) -> Sequence[int]:
        """The layers it may edit in a model of ``layers`` layers (its ablation profile tries these)."""
        return range(layers)

    def edits(self) -> list:
        """The interventions it puts on a model."""
        raise NotImplementedError

    @property
    def scaled(self) -> int:
        """How many heads it edits."""
        raise NotImplementedError

    def check_depth(self, layers: int) -> None:
        """Refuse a model this tuning was not made for (checked when it is applied)."""

    @classmethod
    def check_model(cls, layers: int, options: dict) -> None:
        """Refuse, before a run starts, a model of ``layers`` layers it cannot tune with ``options``."""
