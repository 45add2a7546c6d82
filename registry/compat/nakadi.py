"""Nakadi's compatibility modes and semantic schema versions, through the engine.

Nakadi (docs/specs/nakadi-manual.txt, nakadi-event-types.txt): title/description
changes are PATCH, added properties MINOR (in forward mode also narrowings old
consumers survive), all else MAJOR; ``compatible`` and ``forward`` reject MAJOR
changes, ``none`` accepts anything.

* forward: consumers on the old schema read events of the new one, ignoring
  undeclared attributes: the old schema as written reads the new one.
* compatible: both directions. Events are validated with undeclared
  attributes rejected (additionalProperties is false), while consumers still
  ignore what they do not know. So the closed new schema must read events of
  the closed old one, and the old schema, as consumers read it, events of the
  closed new one.
* none: never rejected; MAJOR when the change would fail ``compatible``.

The broker answers with the violations' words only, so they are built without examples.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from changebroker.numerals import whole_number
from changebroker.registry.compat.json_schema import (
    SCHEMA_LISTS,
    SCHEMA_MAPS,
    SCHEMA_VALUES,
    json_schema_violations,
    strip_annotations,
)
from changebroker.registry.compat.model import Evolution, Level, Violation
from changebroker.registry.compat.rules import Rule

NakadiMode = Literal["compatible", "forward", "none"]

# "the following json-schema attributes are not supported" in compatible mode
# (docs/specs/nakadi-manual.txt).
COMPATIBLE_UNSUPPORTED = ("additionalProperties", "additionalItems", "not", "patternProperties")


def subschemas(schema: Any, path: str = "#") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every schema object inside ``schema`` (itself included) with its JSON pointer."""
    if not isinstance(schema, Mapping):
        return
    yield path, schema
    for key in SCHEMA_MAPS:
        if isinstance(schema.get(key), Mapping):
            for name, child in schema[key].items():
                escaped = name.replace("~", "~0").replace("/", "~1")
                yield from subschemas(child, f"{path}/{key}/{escaped}")
    for key in SCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            for index, child in enumerate(schema[key]):
                yield from subschemas(child, f"{path}/{key}/{index}")
    for key in SCHEMA_VALUES:
        child = schema.get(key)
        if isinstance(child, list):
            for index, item in enumerate(child):
                yield from subschemas(item, f"{path}/{key}/{index}")
        else:
            yield from subschemas(child, f"{path}/{key}")


def closed(schema: Any) -> Any:
    """``schema`` with undeclared attributes rejected on every object it describes."""
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in SCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {name: closed(child) for name, child in value.items()}
        elif key in SCHEMA_LISTS and isinstance(value, list):
            out[key] = [closed(child) for child in value]
        elif key in SCHEMA_VALUES:
            out[key] = [closed(v) for v in value] if isinstance(value, list) else closed(value)
        else:
            out[key] = value
    declared = schema.get("type")
    is_object = (
        "properties" in schema
        or declared == "object"
        or (isinstance(declared, list) and "object" in declared)
    )
    if is_object and "additionalProperties" not in schema:
        out["additionalProperties"] = False
    return out


def compatible_mode_violations(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Violation]:
    """Why ``new`` may not follow ``old`` in Nakadi's ``compatible`` mode; [] if it may."""
    return unsupported_keywords(new) + _both_ways(old, new)


def unsupported_keywords(schema: Mapping[str, Any]) -> list[Violation]:
    """Keywords the ``compatible`` mode does not allow anywhere in ``schema``."""
    return [
        Violation(
            f"{path}/{keyword}",
            Rule.KEYWORD_NOT_SUPPORTED,
            f"{keyword!r} is not supported in compatible mode; remove it (undeclared"
            " attributes are already rejected)",
        )
        for path, node in subschemas(schema)
        for keyword in COMPATIBLE_UNSUPPORTED
        if keyword in node
    ]


def _both_ways(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Violation]:
    found = [
        v.relabelled(f"{v.message} (new schema validating events of the old one)")
        for v in json_schema_violations(closed(new), closed(old), examples=False)
    ]
    found += [
        v.relabelled(f"{v.message} (old consumers reading events of the new schema)")
        for v in json_schema_violations(old, closed(new), examples=False)
    ]
    return found


def forward_mode_violations(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Violation]:
    """Why consumers on ``old`` could not read events of ``new``; [] if they can."""
    return [
        v.relabelled(f"{v.message} (old consumers reading events of the new schema)")
        for v in json_schema_violations(old, new, examples=False)
    ]


def nakadi_evolution(mode: NakadiMode, old: Mapping[str, Any], new: Mapping[str, Any]) -> Evolution:
    """The version level of ``old`` -> ``new`` and, when ``mode`` rejects it, why."""
    if _canonical(old) == _canonical(new):
        return Evolution(Level.NONE, [])
    if _canonical(strip_annotations(old)) == _canonical(strip_annotations(new)):
        return Evolution(Level.PATCH, [])
    if mode == "forward":
        found = forward_mode_violations(old, new)
        return Evolution(Level.MAJOR if found else Level.MINOR, found)
    if mode == "compatible":
        found = compatible_mode_violations(old, new)
        return Evolution(Level.MAJOR if found else Level.MINOR, found)
    if mode == "none":
        # Keyword restrictions are compatible mode's own; the level is about the change.
        major = bool(_both_ways(old, new))
        return Evolution(Level.MAJOR if major else Level.MINOR, [])
    raise ValueError(f"unknown Nakadi compatibility mode {mode!r}: use compatible, forward or none")


def next_version(current: str, level: Level) -> str:
    """``"1.0.0"`` + MINOR -> ``"1.1.0"``; NONE keeps the version."""
    parts = current.split(".")
    if len(parts) != 3 or not all(whole_number(p) for p in parts):
        raise ValueError(f"schema version {current!r} is not MAJOR.MINOR.PATCH")
    major, minor, patch = (int(p) for p in parts)
    level = Level(level)
    if level is Level.MAJOR:
        return f"{major + 1}.0.0"
    if level is Level.MINOR:
        return f"{major}.{minor + 1}.0"
    if level is Level.PATCH:
        return f"{major}.{minor}.{patch + 1}"
    return current


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
