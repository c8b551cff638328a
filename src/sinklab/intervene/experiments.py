"""Interventions in runs: an :class:`Experiment` (interventions applied together, one run), the
values command-line options ask for (:func:`interventions_for`), and the hooks and checks of a list
of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from ..core.errors import SinklabError, check
from ..core.hooks import HookFn
from .interventions import BY_TYPE, INTERVENTIONS, Intervention

#: The strengths ``--lam`` sweeps by default (amplify and scale).
DEFAULT_LAMS = (1.0, 2.0, 4.0, 8.0, 16.0)


@dataclass(frozen=True)
class Experiment:
    """Interventions applied together in one run, and the position k whose sink score is reported
    (the first intervention's)."""

    interventions: tuple["Intervention", ...]

    @classmethod
    def of(cls, given) -> "Experiment":
        """An experiment from an :class:`Intervention` or a sequence of them (applied together)."""
        items = tuple(given) if isinstance(given, (tuple, list)) else (given,)
        check(len(items) >= 1, "an experiment needs at least one intervention")
        for iv in items:
            if not isinstance(iv, Intervention):
                raise SinklabError(
                    f"not an intervention: {iv!r} "
                    "(give objects such as MaskSelf(10), as applied() takes; command-line options: interventions_for(options))"
                )
        return cls(items)

    @property
    def label(self) -> str:
        return " + ".join(iv.label for iv in self.interventions)

    @property
    def k(self) -> int:
        return self.interventions[0].reported_position

    @property
    def lam(self) -> Optional[float]:
        strengths = [iv.strength for iv in self.interventions if iv.strength is not None]
        return strengths[0] if strengths else None


def recordable(cls: type[Intervention]) -> type[Intervention]:
    """Class decorator for an intervention with no ``sinklab intervene`` option: lets
    :meth:`Intervention.from_record` rebuild it from a configuration's record (``register`` does
    the same for the options' classes)."""
    BY_TYPE[cls.__name__] = cls
    return cls


def hooks_of(interventions: Sequence[Intervention], n_heads: int) -> list[tuple[str, HookFn]]:
    return [hook for iv in interventions for hook in iv.hooks(n_heads)]


def validate_all(interventions: Sequence[Intervention], n_layers: int, n_heads: int, n_tokens: int) -> None:
    for iv in interventions:
        if not isinstance(iv, Intervention):
            raise SinklabError(f"not an intervention: {iv!r}")
        iv.validate(n_layers, n_heads, n_tokens)


def interventions_for(
    options: dict,
    lams: Sequence[float] = DEFAULT_LAMS,
    layers: Optional[Sequence[int]] = None,
    heads: Optional[Sequence[int]] = None,
) -> list[Intervention]:
    """The interventions (one run each) that command-line options ask for: ``options`` maps an
    option of the registry to its value (``{"mask_self": [10], "amplify": 4}``), ``lams`` the
    strengths amplify and scale sweep, ``layers`` / ``heads`` where each acts (None: everywhere)."""
    unknown = sorted(set(options) - set(INTERVENTIONS))
    check(not unknown, f"unknown intervention {', '.join(unknown)}; choose from: {', '.join(INTERVENTIONS)}")
    where = {"layers": tuple(layers) if layers is not None else None, "heads": tuple(heads) if heads is not None else None}
    found = [
        iv for option, cls in INTERVENTIONS.items() if option in options for iv in cls.for_option(options[option], lams, where)
    ]
    check(bool(found), "name at least one intervention: " + ", ".join(f"--{o.replace('_', '-')}" for o in INTERVENTIONS))
    return found
