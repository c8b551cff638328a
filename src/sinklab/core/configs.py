"""One configuration dataclass per capability, and everything both faces read from it.

A capability's config is a dataclass whose fields are its settings (nested dataclasses group
them: the inputs, the metric thresholds, the load options). Each field is declared with
:func:`setting`, which holds its help and, where the command line spells it differently, its
flag, old spellings and parser. From that one declaration:

* the command line's flags (:mod:`.flags`), so a default or a help text is never typed twice;
* the notebook functions' keyword arguments (:mod:`.keywords`): the same names, flat, with the
  same defaults, each checked against its setting's type;
* whether two runs are the same run (:func:`first_difference`): every field decides it except
  those declared ``result=False`` (where or how a run is written, not what it computes);
* the strict reading of a saved ``config.json`` (:func:`from_dict`: unknown or missing keys are
  refused in one line), after its migrations (:func:`migrate`): a config class may declare
  ``VERSION`` and ``MIGRATIONS`` (version -> a function from that version's dict to the next's),
  the one table of what older runs meant by a key they lack or spell otherwise.

argparse is kept rather than tyro or simple-parsing: the documented flags (``--tokens`` for a
field named ``tokens`` in three configs, ``--text FILE``, comma lists such as ``--lam 1,2,4``,
old spellings kept as aliases) are a contract those libraries would rename. The same reading of a
saved config.json (strict, versioned) is sixty lines here, where pydantic would be a dependency
and a second description of the classes.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from functools import lru_cache
from typing import Any, Callable, Collection, Optional, Sequence

from .errors import SinklabError, check

CONFIG_VERSION_KEY = "config_version"


def setting(
    default: Any = MISSING,
    *,
    help: str = "",
    flag: Optional[str] = None,
    aliases: Sequence[str] = (),
    alias_note: Optional[str] = None,
    parse: Optional[Callable[[str], Any]] = None,
    choices: Optional[Collection[str]] = None,
    metavar: Optional[str] = None,
    shown: Optional[str] = None,
    negate: bool = False,
    cli: bool = True,
    result: bool = True,
    default_factory: Any = MISSING,
) -> Any:
    """A config field with what its flag needs: ``help``; ``flag`` when it is not ``--name``
    (``aliases``: old spellings, or another tool's where ``alias_note`` says whose: the help
    names them with it); ``parse`` a command-line string into the field's value (default:
    from the field's type, comma lists for tuples); ``choices``; ``shown`` the default as the help
    prints it; ``negate`` for a True boolean switched off by ``--no-name``; ``cli=False`` for a
    field the command line sets otherwise; ``result=False`` for a field that does not change what
    a run computes (two runs that differ only there are the same run)."""
    meta = {
        "help": help,
        "flag": flag,
        "aliases": tuple(aliases),
        "alias_note": alias_note,
        "parse": parse,
        "choices": choices,
        "metavar": metavar,
        "shown": shown,
        "negate": negate,
        "cli": cli,
        "result": result,
    }
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Leaf:
    """A setting of a (possibly nested) config: its flat ``name`` and its ``path`` from the top."""

    name: str
    path: tuple[str, ...]
    field: dataclasses.Field
    kind: Any  # the resolved type

    @property
    def meta(self) -> dict:
        return {
            "help": "",
            "flag": None,
            "aliases": (),
            "alias_note": None,
            "parse": None,
            "choices": None,
            "metavar": None,
            "shown": None,
            "negate": False,
            "cli": True,
            "result": True,
            **self.field.metadata,
        }

    @property
    def flag(self) -> str:
        return self.meta["flag"] or f"--{self.name.replace('_', '-')}"

    def default(self) -> Any:
        if self.field.default is not MISSING:
            return self.field.default
        if self.field.default_factory is not MISSING:
            return self.field.default_factory()
        return MISSING


def base_type(kind: Any) -> tuple[Any, bool]:
    """(the type inside Optional[...], whether None is allowed)."""
    args = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else kind), True
    return kind, False


def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


def _nested(kind: Any) -> Optional[type]:
    """The dataclass a field groups (its type), or None for a plain setting."""
    return kind if isinstance(kind, type) and is_dataclass(kind) else None


@lru_cache(maxsize=None)
def leaves(cls: type) -> tuple[Leaf, ...]:
    """Every setting of ``cls``, nested groups flattened; flat names must be unique."""
    found: list[Leaf] = []

    def walk(owner: type, path: tuple[str, ...]) -> None:
        hints = _hints(owner)
        for f in fields(owner):
            if not f.init:
                continue
            inner = _nested(hints[f.name])
            if inner is not None:
                walk(inner, (*path, f.name))
            else:
                found.append(Leaf(f.name, (*path, f.name), f, hints[f.name]))

    walk(cls, ())
    names = [leaf.name for leaf in found]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise TypeError(f"{cls.__name__}: settings {', '.join(repeated)} appear in two groups; flat names must be unique")
    return tuple(found)


def leaf(cls: type, name: str) -> Leaf:
    return next(x for x in leaves(cls) if x.name == name)


def changed(cfg: Any, names: Sequence[str]) -> list[str]:
    """Which of the top-level settings ``names`` of ``cfg`` differ from their class defaults: all a
    config can tell of what was given (the command line tells more: ``cli.args.given_settings``)."""
    return [name for name in names if getattr(cfg, name) != getattr(type(cfg), name)]


def build(cls: type, values: dict) -> Any:
    """``cls`` with the flat ``values`` placed in their groups (the others keep their defaults)."""
    unknown = sorted(set(values) - {x.name for x in leaves(cls)})
    if unknown:
        raise SinklabError(
            f"unknown setting {', '.join(unknown)} for {cls.__name__}; known: {', '.join(x.name for x in leaves(cls))}"
        )
    hints = _hints(cls)
    kwargs = {}
    for f in fields(cls):
        if not f.init:
            continue
        inner = _nested(hints[f.name])
        if inner is not None:
            own = {x.name for x in leaves(inner)}
            kwargs[f.name] = build(inner, {k: v for k, v in values.items() if k in own})
        elif f.name in values:
            kwargs[f.name] = values[f.name]
    return cls(**kwargs)


def flat(cfg: Any) -> dict:
    """A config's settings by flat name (the inverse of :func:`build`)."""
    values = {}
    for x in leaves(type(cfg)):
        value = cfg
        for part in x.path:
            value = getattr(value, part)
        values[x.name] = value
    return values


def shown_default(value: Any) -> str:
    """A default as help texts show it (a tuple as a comma list)."""
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) if value else "none"
    return str(value)


# --------------------------------------------------------------------------- saved configurations


def not_result_paths(cls: Optional[type]) -> frozenset[str]:
    """Dotted paths of the settings declared ``result=False``."""
    if cls is None:
        return frozenset()
    return frozenset(".".join(x.path) for x in leaves(cls) if not x.meta["result"])


def migrate(cls: type, saved: dict) -> dict:
    """A saved config dict of any earlier version of ``cls`` brought to the current version, by
    the class's ``MIGRATIONS`` (version -> function); a newer version is refused."""
    version, current = saved.get(CONFIG_VERSION_KEY, 0), getattr(cls, "VERSION", 0)
    check(
        isinstance(version, int) and version <= current,
        f"this configuration was written by a newer sinklab ({CONFIG_VERSION_KEY} {version}; this one reads up to {current})",
    )
    migrations = getattr(cls, "MIGRATIONS", {})
    data = {k: v for k, v in saved.items() if k != CONFIG_VERSION_KEY}
    for step in range(version, current):
        data = migrations[step](data) if step in migrations else data
    return {CONFIG_VERSION_KEY: current, **data}


def recorded(saved: dict, keys: Sequence[str], version: int) -> dict:
    """``saved``, a config.json of ``version`` that a migration reads, when it holds every key of
    ``keys`` (that version always wrote them); else one line, never today's default."""
    missing = [key for key in keys if key not in saved]
    check(not missing, f"a config.json of version {version} lacks {', '.join(missing)}: what made the run is unknown")
    return saved


def first_difference(saved: Any, current: Any, skip: frozenset[str] = frozenset(), where: str = "") -> Optional[str]:
    """The first key of ``current`` (dotted, ``[i]`` for list items) whose value differs from
    ``saved``'s, with both values; None when they agree. Paths in ``skip`` (settings that do not
    change results) are not compared; keys only ``saved`` has (derived facts) are ignored."""
    if isinstance(current, dict) and isinstance(saved, dict):
        for key, value in current.items():
            name = f"{where}.{key}" if where else key
            if name in skip:
                continue
            if key not in saved:
                return f"{name} is not recorded there"
            found = first_difference(saved[key], value, skip, name)
            if found:
                return found
        return None
    if isinstance(current, list) and isinstance(saved, list) and len(current) == len(saved):
        return next(
            (found for i, (a, b) in enumerate(zip(saved, current)) if (found := first_difference(a, b, skip, f"{where}[{i}]"))),
            None,
        )
    return None if saved == current else f"{where}: {_brief(saved)} there, {_brief(current)} now"


def _brief(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def from_dict(cls: type, data: dict, what: str) -> Any:
    """``cls`` from a saved dict, strictly: an unknown key (a newer sinklab wrote it) or a
    missing one (what made the run is unknown) is refused in one line naming it; lists become
    tuples where the field is a tuple. ``what`` names the file in the message."""
    check(isinstance(data, dict), f"{what}: expected an object of settings, got {type(data).__name__}")
    hints = _hints(cls)
    names = {f.name for f in fields(cls) if f.init}
    unknown = sorted(set(data) - names - {CONFIG_VERSION_KEY})
    check(
        not unknown,
        f"{what} has {', '.join(unknown)}, which this sinklab's {cls.__name__} does not know: a newer sinklab wrote it",
    )
    missing = sorted(names - set(data))
    check(not missing, f"{what} lacks {', '.join(missing)}: what made the run is unknown")
    return cls(**{name: _value(hints[name], data[name], f"{what}: {name}") for name in names})


def _value(kind: Any, value: Any, what: str) -> Any:
    base, optional = base_type(kind)
    if value is None:
        check(optional or base is Any, f"{what} is null")
        return None
    inner = _nested(base)
    if inner is not None:
        return from_dict(inner, value, what)
    if typing.get_origin(base) is tuple and isinstance(value, list):
        return tuple(value)
    return value
