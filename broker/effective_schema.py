"""The effective schema of an event type, and its compiled validator (DESIGN.md, seed 003).

business: the user schema plus required ``metadata``; data: the user schema
as ``data`` beside required ``metadata``, ``data_type``, ``data_op``;
undefined: the user schema as given. In ``compatible`` mode undeclared
attributes are rejected (``additionalProperties: false`` on every object).

The validator is jsonschema's Draft4Validator, built once per schema version
and reused for every event: the library's validator objects keep the resolved
schema, so per-event cost is the walk over the event alone. Formats are
checked as Nakadi does for the metadata: ``date-time`` is RFC 3339, checked by
our own function (jsonschema's needs an optional package), and ``eid`` is a
UUID by pattern (draft 04 has no ``uuid`` format).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from jsonschema import FormatChecker
from jsonschema.validators import Draft4Validator

from registry.compat.nakadi import closed

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


_formats = FormatChecker(formats=())


@_formats.checks("date-time", raises=ValueError)
def _date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if not _RFC3339.match(value):
        return False
    datetime.fromisoformat(value.replace("z", "Z").replace("t", "T"))
    return True


class EventValidator:
    """Validates one event against an effective schema; built once per schema version."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self._validator = Draft4Validator(schema, format_checker=_formats)

    def errors(self, event: Any) -> Iterator[str]:
        """Each violation as ``"#/path: message"``; nothing when the event is valid."""
        for error in self._validator.iter_errors(event):
            path = "/".join(str(p) for p in error.absolute_path)
            yield f"#/{path}: {error.message}" if path else f"#: {error.message}"

    def first_error(self, event: Any) -> str | None:
        return next(self.errors(event), None)
