"""The registry of cache policies and their one sink vocabulary.

Every press and quantizer registers under a name (:func:`register_policy`) in :data:`POLICIES`, and
in its family's view (:data:`PRESSES` or :data:`QUANTIZERS`, from the class's ``kind``), which
``sinklab compress --press``/``--quant`` offer. The sinks a policy holds apart are one setting,
``keep_sinks`` on a press and ``protect`` on a quantizer: 0, N (the first N tokens) or
:data:`DETECTED` (:mod:`.sinks`).
"""

from __future__ import annotations

from typing import Any, Callable, Union

from ..core.errors import check

KeepSinks = Union[int, str]
DETECTED = "detected"
#: What a policy may ask the prefill to record per layer (:mod:`.tally`): every query's attention
#: summed per key ("received"), and the last queries' ("window").
NEEDS = ("received", "window")

#: Every cache policy by name, in the order they registered (``sinklab compress --press/--quant``).
POLICIES: dict[str, type] = {}
#: The same registry's presses and quantizers (filled by :func:`register_policy` from the class's ``kind``).
PRESSES: dict[str, type] = {}
QUANTIZERS: dict[str, type] = {}
_FAMILIES = {"press": PRESSES, "quantizer": QUANTIZERS}


def register_policy(name: str) -> Callable[[type], type]:
    """Class decorator: make a press or a quantizer known by ``name``."""

    def add(cls: Any) -> Any:  # a CachePolicy subclass (registry sits below policy: no import of it)
        if name in POLICIES:
            raise ValueError(f"cache policy {name!r} is registered twice")
        cls.name = name
        POLICIES[name] = _FAMILIES[cls.kind][name] = cls
        return cls

    return add


def policy_named(name: str, **settings):
    """The press or quantizer registered as ``name`` with ``settings`` (its fields)."""
    check(name in POLICIES, f"unknown press or quantizer {name!r}; choose from: {', '.join(POLICIES)}")
    return POLICIES[name](**settings)


def check_sink_setting(value, name: str, detected: bool = True) -> None:
    """A ``keep_sinks`` or ``protect`` setting: a number of first tokens (not a bool), or
    "detected" where ``detected`` allows it; anything else is a one-line error."""
    number = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    check(
        number or (detected and value == DETECTED),
        f"{name} must be 0, a number of first tokens N{', or ' + repr(DETECTED) if detected else ''}; got {value!r}",
    )
