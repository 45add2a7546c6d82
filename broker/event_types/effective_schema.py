"""The effective schema of an event type, and its compiled validator.

As docs/specs/nakadi-event-types.txt defines it:

business: the user schema plus required ``metadata``; data: the user schema
as ``data`` beside required ``metadata``, ``data_type``, ``data_op``;
undefined: the user schema as given. In ``compatible`` mode undeclared
attributes are rejected (``additionalProperties: false`` on every object).

Events are judged by two compiled draft-04 validators. jsonschema-rs (Rust)
answers "valid" in ~1 us per 1 KB event, most of it our ``date-time`` check;
an event it refuses, or cannot read (lone surrogates are not UTF-8), is judged
again by fastjsonschema's generated Python (~3 us), whose verdict stands and
whose message is the 422 item's ``detail``: the Rust messages quote the whole
offending value. ``tests/broker/test_validation.py`` checks that both give
jsonschema's Draft4Validator's verdict on our cases. ``date-time`` is RFC 3339,
checked by our own function; ``eid`` is a UUID by pattern (draft 04 has no
``uuid`` format); the other draft-04 formats (email, hostname, ipv4, ipv6, uri)
are checked with fastjsonschema's expressions in both, as Nakadi checks formats
too; formats of later drafts are not checked.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import fastjsonschema
import jsonschema_rs
from fastjsonschema.draft04 import CodeGeneratorDraft04

from changebroker.registry.compat.nakadi import closed

DRAFT_04 = "http://json-schema.org/draft-04/schema#"
UUID_PATTERN = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
# Valid by the grammar alone (days every month has, times within a day, offsets within a
# day, ASCII digits, year 0001 on): most timestamps, without the calendar check's ~0.3 us.
_PLAIN_RFC3339 = re.compile(
    r"(?!0000)[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])[Tt]([01][0-9]|2[0-3]):[0-5][0-9]"
    r":[0-5][0-9](\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])\Z"
)
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def compacted(cleanup_policy: str) -> bool:
    """Whether Kafka compacts the event type's topic (``compact``, or Nakadi's
    ``compact_and_delete``: compacted and deleted by retention): its events then carry the key
    compaction keeps the last event of, ``metadata.partition_compaction_key``."""
    return cleanup_policy in ("compact", "compact_and_delete")


def _metadata(cleanup_policy: str) -> dict[str, Any]:
    required = ["eid", "occurred_at"]
    if compacted(cleanup_policy):
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
    if not isinstance(value, str):
        return True
    return _PLAIN_RFC3339.match(value) is not None or is_calendar_date_time(value)


def is_calendar_date_time(value: str) -> bool:
    """The whole check, which ``is_date_time``'s shortcut must agree with."""
    if not _RFC3339.match(value):
        return False
    try:
        datetime.fromisoformat(value.upper())
    except ValueError:
        return False
    return True


class UncompilableSchema(ValueError):
    """The schema is valid draft 04 but too deep or odd to become a validator."""


def _is_regex(value: object) -> bool:
    if isinstance(value, str):
        try:
            re.compile(value)
        except re.error:
            return False
    return True


def _unchecked(value: object) -> bool:
    return True


# What fastjsonschema checks, for jsonschema-rs to check the same way: our date-time, its
# expressions for the other draft-04 formats, a Python regex; the Rust validator's formats of
# later drafts (date, time, idn-email) unchecked, as fastjsonschema leaves them.
_FORMATS: dict[str, Any] = {
    **{
        name: re.compile(expression).match
        for name, expression in CodeGeneratorDraft04.FORMAT_REGEXS.items()
    },
    "date-time": is_date_time,
    "regex": _is_regex,
    "date": _unchecked,
    "time": _unchecked,
    "idn-email": _unchecked,
}


def _refuses(event: Any) -> bool:
    return False


class EventValidator:
    """Validates one event against an effective schema; built once per schema version."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = schema  # the effective schema, as built
        # Draft 04 whatever "$schema" the user wrote: Nakadi's contract is draft 04.
        draft_04 = {**schema, "$schema": DRAFT_04}
        try:
            # Raises JsonSchemaValueException, the verdict and message when ``accepts`` refuses.
            self.validate = fastjsonschema.compile(draft_04, formats={"date-time": is_date_time})
        except (fastjsonschema.JsonSchemaDefinitionException, SyntaxError, RecursionError) as exc:
            # Python refuses code nested past ~20 loops: arrays of arrays of arrays...
            raise UncompilableSchema(f"{type(exc).__name__}: {exc}") from None
        # jsonschema-rs: True only for a valid event; ValueError for one it cannot read.
        self.accepts: Callable[[Any], bool]
        try:
            self.accepts = jsonschema_rs.Draft4Validator(
                draft_04, formats=_FORMATS, validate_formats=True
            ).is_valid
        except ValueError:
            # A pattern in Python's regex dialect only ("(?P<name>...)", \Z): fastjsonschema
            # judges every event of this schema.
            self.accepts = _refuses

    def first_error(self, event: Any) -> str | None:
        """``None`` when ``event`` is valid, else ``"#/path: what is wrong"``."""
        try:
            if self.accepts(event):
                return None
        except ValueError:
            pass  # a lone surrogate, which Rust strings cannot hold
        try:
            self.validate(event)
        except fastjsonschema.JsonSchemaValueException as exc:
            # fastjsonschema names the value "data.a.b" and says "data.a.b must ..."
            said = exc.message.removeprefix(f"{exc.name} ") if exc.name else exc.message
            pointer = "/".join(str(p) for p in (exc.path or [])[1:])
            return f"#/{pointer}: {said}"
        return None
