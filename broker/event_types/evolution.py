"""The next schema version of an event type, as Nakadi's schema evolution decides it.

``json_schema`` to ``json_schema``: the compatibility mode's rules and semantic versions
(:mod:`changebroker.registry.compat.nakadi`). ``json_schema`` to ``avro_schema``: a new MAJOR
version in every mode; JSON events are still validated against the newest ``json_schema`` version.
``avro_schema`` to ``avro_schema``: in ``forward`` mode the previous schema must read events of
the new one, in ``compatible`` mode each the other's (Avro's resolution rules); a changed
schema is a new MAJOR version, one that only changed its ``doc`` none. Back to
``json_schema``: refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from changebroker.broker.event_types.rules import AVRO_SCHEMA, InvalidEventType
from changebroker.registry.compat import Level, SchemaError, nakadi_evolution, next_version
from changebroker.registry.compat.avro import avro_violations


def new_version(current: Mapping[str, Any], updated: Mapping[str, Any]) -> str | None:
    """``updated``'s schema version after ``current``'s, None when the schema did not change;
    InvalidEventType when its compatibility mode refuses the change."""
    old_type, new_type = current["schema"]["type"], updated["schema"]["type"]
    old = json.loads(current["schema"]["schema"])
    new = json.loads(updated["schema"]["schema"])
    mode = updated["compatibility_mode"]
    version = current["schema"]["version"]
    if new_type == AVRO_SCHEMA:
        if old_type != AVRO_SCHEMA:
            return next_version(version, Level.MAJOR)
        found = _avro_violations(mode, old, new)
        if found:
            raise InvalidEventType(f"Failed to evolve avro schema due to [{'; '.join(found)}]")
        if _without_docs(old) == _without_docs(new):
            return None
        return next_version(version, Level.MAJOR)
    if old_type == AVRO_SCHEMA:
        raise InvalidEventType("Cannot change from avro_schema to json_schema!")
    try:
        evolution = nakadi_evolution(mode, old, new)
    except SchemaError as exc:
        raise InvalidEventType(f"the compatibility check cannot read the schema: {exc}") from None
    if evolution.violations:
        raise InvalidEventType(
            f"schema change not allowed in {mode} mode: "
            + "; ".join(f"{v.path}: {v.message} [{v.rule}]" for v in evolution.violations)
        )
    changed = next_version(version, evolution.level)
    return None if changed == version else changed


def _avro_violations(mode: str, old: Any, new: Any) -> list[str]:
    """Why ``mode`` refuses ``old`` -> ``new``, as ``{type, location, message}`` texts."""
    pairs: list[tuple[str, Any, Any]] = []
    if mode in ("forward", "compatible"):
        pairs.append(("forward", old, new))  # readers of the old schema, events of the new
    if mode == "compatible":
        pairs.append(("backward", new, old))
    found = []
    for direction, reader, writer in pairs:
        try:
            violations = avro_violations(reader, writer)
        except SchemaError as exc:
            return [f"the schema cannot be read: {exc}"]
        found += [f"{{ {direction}: {v.rule} at {v.path}: {v.message} }}" for v in violations]
    return found


def _without_docs(schema: Any) -> Any:
    """As Avro compares schemas: documentation is not part of one."""
    if isinstance(schema, Mapping):
        return {k: _without_docs(v) for k, v in schema.items() if k != "doc"}
    if isinstance(schema, list):
        return [_without_docs(item) for item in schema]
    return schema
