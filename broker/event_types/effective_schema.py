"""The effective schema of an event type, and its compiled validator.

As docs/specs/nakadi-event-types.txt defines it:

business: the user schema plus required ``metadata``; data: the user schema
as ``data`` beside required ``metadata``, ``data_type``, ``data_op``;
undefined: the user schema as given. In ``compatible`` mode undeclared
attributes are rejected (``additionalProperties: false`` on every object).

The validator is fastjsonschema's draft-04 code generator: the effective
schema becomes a Python function once per schema version, ~3 us per 1 KB
event against ~34 us for jsonschema's Draft4Validator walking the schema
(``tests/broker/test_validation.py`` checks both give the same verdict on our
cases). ``date-time`` is RFC 3339, checked by our own function; ``eid`` is a
UUID by pattern (draft 04 has no ``uuid`` format); the other draft-04 formats
(email, hostname, ipv4, ipv6, uri) are checked as fastjsonschema does, as
Nakadi checks formats too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import fastjsonschema

from registry.compat.nakadi import closed

DRAFT_04 = "http://json-schema.org/draft-04/schema#"
UUID_PATTERN = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _metadata(cleanup_policy: str) -> dict[str, Any]:
    required = ["eid", "occurred_at"]
    if cleanup_policy == "compact":
        required.append("partition_compaction_key")
    return {
        "type": "object",
        "properties": {
            "eid": {"type": "string", "pattern": UUID_PATTERN},
            "event_type": {"type": "string"},
            "occurred_at": {"type": "string", "format": "date-time"},
            "received_at": {"type": "string", "format": "date-time"},
            "version": {"type": "string"},
            "parent_eids": {"type": "array", "items": {"type": "string", "pattern": UUID_PATTERN}},
            "flow_id": {"type": "string"},
            "partition": {"type": "string"},
            "partition_compaction_key": {"type": "string"},
            "span_ctx": {"type": "object", "additionalProperties": {"type": "string"}},
            "published_by": {"type": "string"},
        },
        "required": required,
    }


def build(
    category: str, user_schema: Mapping[str, Any], mode: str, cleanup_policy: str
) -> dict[str, Any]:
    """The schema events of this event type are validated against."""
    schema: dict[str, Any] = dict(closed(user_schema) if mode == "compatible" else user_schema)
    if category == "undefined":
        return schema
    metadata = _metadata(cleanup_policy)
    if category == "business":
        return {
            **schema,
            "properties": {**schema.get("properties", {}), "metadata": metadata},
            "required": sorted({*schema.get("required", []), "metadata"}),
        }
    effective: dict[str, Any] = {
        "type": "object",
        "properties": {
            "data": schema,
            "data_type": {"type": "string"},
            "data_op": {"type": "string", "enum": ["C", "U", "D", "S"]},
            "metadata": metadata,
        },
        "required": ["data", "data_op", "data_type", "metadata"],
    }
    if mode == "compatible":
        effective["additionalProperties"] = False
    return effective


def is_date_time(value: object) -> bool:
    """RFC 3339 ``date-time``: the grammar, and a real calendar date and time."""
    if not isinstance(value, str) or not _RFC3339.match(value):
        return not isinstance(value, str)
    try:
        datetime.fromisoformat(value.upper())
    except ValueError:
        return False
    return True


class UncompilableSchema(ValueError):
    """The schema is valid draft 04 but too deep or odd to become a validator."""


class EventValidator:
    """Validates one event against an effective schema; built once per schema version."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        try:
            # Draft 04 whatever "$schema" the user wrote: Nakadi's contract is draft 04.
            self._validate = fastjsonschema.compile(
                {**schema, "$schema": DRAFT_04}, formats={"date-time": is_date_time}
            )
        except (fastjsonschema.JsonSchemaDefinitionException, SyntaxError, RecursionError) as exc:
            # Python refuses code nested past ~20 loops: arrays of arrays of arrays...
            raise UncompilableSchema(f"{type(exc).__name__}: {exc}") from None

    def first_error(self, event: Any) -> str | None:
        """``None`` when ``event`` is valid, else ``"#/path: what is wrong"``."""
        try:
            self._validate(event)
        except fastjsonschema.JsonSchemaValueException as exc:
            # fastjsonschema names the value "data.a.b" and says "data.a.b must ..."
            said = exc.message.removeprefix(f"{exc.name} ") if exc.name else exc.message
            pointer = "/".join(str(p) for p in (exc.path or [])[1:])
            return f"#/{pointer}: {said}"
        return None
