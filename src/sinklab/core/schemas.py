"""The JSON schema of each kind of ``summary.json`` (``sinklab/schemas/<kind>.json``; also
``bench_results``, a benchmark's per-model results file): what a script reading run directories
may rely on. The tests validate every run directory the suite
writes against its kind's schema; :func:`validate` does the same for any summary (it needs the
``jsonschema`` package)."""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from importlib import resources
from typing import Callable

from .errors import SinklabError, check


def kinds() -> list[str]:
    """Every kind with a schema."""
    return sorted(
        path.name.removesuffix(".json")
        for path in resources.files("sinklab").joinpath("schemas").iterdir()
        if path.name.endswith(".json")
    )


#: The lists of names a schema takes from a registry, by kind: the JSON pointer of an ``enum`` ->
#: the registry's names now (a tuning method registered in one file is in the schema with no edit
#: of it; the file ships the built-in names).
REGISTERED_ENUMS: dict[str, dict[str, Callable[[], list[str]]]] = {}


#: The summary keys a registry adds to a kind, by kind: the registry's keys now (a scan metric
#: registered in one file is a key of the summary's schema, any JSON value, with no edit of it).
REGISTERED_KEYS: dict[str, Callable[[], list[str]]] = {}


def schema_of(kind: str) -> dict:
    """The JSON schema of a ``kind`` of summary, its registered lists and keys as their registries
    hold them."""
    schema = copy.deepcopy(_shipped(kind))
    for key in REGISTERED_KEYS.get(kind, list)():
        schema["properties"].setdefault(key, {"description": "an entry registered beside the shipped ones"})
    for pointer, names in REGISTERED_ENUMS.get(kind, {}).items():
        place = schema
        for key in pointer.strip("/").split("/"):
            place = place[key]
        place["enum"] = names()
    return schema


@lru_cache(maxsize=None)
def _shipped(kind: str) -> dict:
    check(kind in kinds(), f"no schema for summaries of kind {kind!r}; kinds: {', '.join(kinds())}")
    return json.loads(resources.files("sinklab").joinpath("schemas", f"{kind}.json").read_text())


def validate(summary: dict) -> None:
    """Raise :class:`SinklabError` naming the first place where ``summary`` breaks its kind's schema."""
    try:
        import jsonschema
    except ImportError:
        raise SinklabError("validating a summary needs the jsonschema package: pip install jsonschema") from None
    check(isinstance(summary, dict) and isinstance(summary.get("kind"), str), "not a sinklab summary (no kind)")
    validator = jsonschema.Draft202012Validator(schema_of(summary["kind"]), registry=_registry())
    error = jsonschema.exceptions.best_match(validator.iter_errors(summary))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the top level"
        raise SinklabError(f"a {summary['kind']} summary breaks its schema at {where}: {error.message[:300]}")


def _registry():
    """Every schema by its ``$id`` (``sinklab/<kind>.json``), so one kind's schema can refer to
    another's (a bench summary holds results files)."""
    from referencing import Registry, Resource

    return Registry().with_resources((schema_of(kind)["$id"], Resource.from_contents(schema_of(kind))) for kind in kinds())
