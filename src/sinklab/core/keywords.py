"""The notebook's side of a config class (:mod:`.configs`), as :mod:`.flags` is the command line's:
keyword arguments read into the config and checked against each setting's type (a wrong type is
one line naming the setting, not a traceback from deep inside a run), and the signature and
settings list the notebook functions show."""

from __future__ import annotations

import inspect
import typing
from dataclasses import MISSING
from typing import Any, Optional, Sequence

from .configs import Leaf, base_type, build, leaves, shown_default
from .errors import SinklabError, check

#: How a message names the values of a type.
_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "True or False"}


def from_kwargs(cls: type, kwargs: dict, aliases: Optional[dict] = None, what: str = "") -> Any:
    """``cls`` from a notebook function's keyword arguments: flat setting names (and old
    spellings in ``aliases``: old name -> name), each value of its setting's type (see
    :func:`checked`); an unknown name is one line listing the known."""
    given = dict(kwargs)
    for old, new in (aliases or {}).items():
        if old in given:
            check(new not in given, f"{what}: give {new}= or its old spelling {old}=, not both")
            given[new] = given.pop(old)
    known = {x.name: x for x in leaves(cls)}
    unknown = sorted(set(given) - set(known))
    check(not unknown, f"{what}: unknown argument {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    given = {name: checked(known[name], value, what) for name, value in given.items()}
    try:
        return build(cls, given)
    except TypeError as exc:
        raise SinklabError(f"{what}: {exc}") from None


def checked(x: Leaf, value: Any, what: str) -> Any:
    """``value`` as setting ``x`` holds it, or one line saying what ``x`` takes: an int for an int
    (not a bool), a number for a float, True or False for a bool, a string (one of its choices,
    where it has some), None only where the setting is optional; a list or tuple for a tuple
    setting, each item checked (a bare string is one item of a tuple of strings)."""
    base, optional = base_type(x.kind)
    if value is None:
        check(optional or base is Any, f"{what}: {x.name} takes {_named(base)}, not None")
        return None
    if base is tuple or typing.get_origin(base) is tuple:
        args = typing.get_args(base)
        item = args[0] if len(args) == 2 and args[1] is Ellipsis else Any
        value = (value,) if isinstance(value, str) and item is str else value
        each = "" if item is Any else f" (each {_named(item)})"
        check(isinstance(value, (list, tuple)), f"{what}: {x.name} takes a list or tuple{each}, got {value!r}")
        return tuple(_one(x, item, v, what, f"each item of {x.name}") for v in value)
    return _one(x, x.kind, value, what, x.name)


def _one(x: Leaf, kind: Any, value: Any, what: str, name: str) -> Any:
    base, optional = base_type(kind)
    if value is None and (optional or base is Any):
        return None
    if base is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    typed = base is not Any and isinstance(base, type) and typing.get_origin(base) is None  # Any, generics: not checked
    fits = not typed or (isinstance(value, base) and not (base is int and isinstance(value, bool)))
    check(fits, f"{what}: {name} takes {_named(base)}{' or None' if optional else ''}, got {value!r}")
    choices = x.meta["choices"] if x.meta["parse"] is None else None
    check(
        not choices or not isinstance(value, str) or value in choices,
        f"{what}: {name} takes one of {', '.join(choices or ())}, got {value!r}",
    )
    return value


def _named(kind: Any) -> str:
    return _NAMES.get(kind) or (f"a {kind.__name__}" if kind is not Any and isinstance(kind, type) else "a value")


def signature(
    cls: type, leading: Sequence[inspect.Parameter], trailing: Sequence[inspect.Parameter] = (), skip: Sequence[str] = ()
) -> inspect.Signature:
    """The signature a notebook function shows (``help()``, tab completion): ``leading``
    parameters, then every setting of ``cls`` as a keyword with its default, then ``trailing``."""
    settings = [
        inspect.Parameter(x.name, inspect.Parameter.KEYWORD_ONLY, default=x.default(), annotation=x.kind)
        for x in leaves(cls)
        if x.name not in skip and x.default() is not MISSING
    ]
    return inspect.Signature([*leading, *settings, *trailing])


def settings_doc(cls: type, skip: Sequence[str] = ()) -> str:
    """The settings of ``cls`` as a docstring block (name, default, help)."""
    return "\n".join(
        f"    ``{x.name}`` ({shown_default(x.default())}): {x.meta['help']}"
        for x in leaves(cls)
        if x.name not in skip and x.meta["help"]
    )


def document(
    fn: Any, cls: type, leading: Sequence[inspect.Parameter], trailing: Sequence[inspect.Parameter] = (), skip: Sequence[str] = ()
) -> None:
    """Give the notebook function ``fn`` the :func:`signature` and the :func:`settings_doc` of ``cls``,
    after its own docstring (``help()`` and tab completion show them)."""
    fn.__signature__ = signature(cls, leading, trailing, skip)
    fn.__doc__ = fn.__doc__.rstrip() + "\n\n" + settings_doc(cls, skip) + "\n"
