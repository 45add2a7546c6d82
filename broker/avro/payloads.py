"""Event payloads in Avro: an event type's ``avro_schema`` versions and what they read and write.

A payload is one record of the event type's schema of the version its envelope names, in
Avro's binary encoding. JSON readers get it as a JSON object (the record's fields, then
``metadata``), as Nakadi renders an Avro event: values as their Avro types (a
``timestamp-millis`` as its number), ``bytes`` and ``fixed`` as Avro's JSON encoding writes
them (one character per byte).
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import fastavro
import orjson
from fastavro.schema import SchemaParseException, UnknownType

from changebroker.broker.avro import metadata as avro_metadata
from changebroker.broker.avro.envelope import Record, plain
from changebroker.registry.compat import SchemaError
from changebroker.registry.compat.avro import parse as parse_avro


class PayloadError(ValueError):
    """A payload, or an event, that does not fit its schema; the message says how."""


@dataclass(frozen=True)
class PayloadSchema:
    """One ``avro_schema`` version, compiled."""

    version: str
    parsed: Any

    def decode(self, payload: bytes) -> Any:
        body = io.BytesIO(payload)
        try:
            record = fastavro.schemaless_reader(body, self.parsed, None)
        except (EOFError, ValueError, UnicodeDecodeError, IndexError) as exc:
            raise PayloadError(
                f"the payload is not a record of schema {self.version}: {exc}"
            ) from None
        if body.tell() != len(payload):
            raise PayloadError(
                f"the payload has {len(payload) - body.tell()} bytes after its record of schema"
                f" {self.version}"
            )
        return record

    def encode(self, record: Mapping[str, Any]) -> bytes:
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(out, self.parsed, record, strict=True)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise PayloadError(f"the event does not fit schema {self.version}: {exc}") from None
        return out.getvalue()


def compile_schema(text: str, version: str = "") -> PayloadSchema:
    """An ``avro_schema``'s text compiled; PayloadError says why it cannot be (Nakadi's events
    are records, so the schema must describe one)."""
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise PayloadError(f"the avro_schema is not valid JSON: {exc}") from None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise PayloadError(
            'the avro_schema must describe a record ({"type": "record", "name": ..., "fields":'
            " [...]}): an event is one"
        )
    try:
        parse_avro(schema)
        parsed = fastavro.parse_schema(plain(schema))
    except (SchemaError, SchemaParseException, UnknownType, ValueError, TypeError) as exc:
        raise PayloadError(f"failed to parse avro schema {exc}") from None
    return PayloadSchema(version, parsed)


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    raise TypeError(f"{type(value).__name__} is not JSON")


def json_event(record: Record, schema: PayloadSchema) -> bytes:
    """A stored Avro event as a JSON reader gets it: the payload's fields, then metadata."""
    event = schema.decode(record.payload)
    event["metadata"] = avro_metadata.to_json(record.metadata)
    try:
        return orjson.dumps(event, default=_json_value)
    except TypeError:  # NaN and infinities, which orjson refuses
        return json.dumps(event, default=_json_value, separators=(",", ":")).encode()


def avro_record(event: Mapping[str, Any], schema: PayloadSchema) -> Record:
    """A JSON event as an Avro envelope's record, its payload written with ``schema``."""
    metadata = event.get("metadata")
    if not isinstance(metadata, Mapping):
        raise PayloadError("the event has no metadata, which an Avro envelope needs")
    try:
        record = avro_metadata.to_avro(metadata, schema.version)
    except ValueError as exc:
        raise PayloadError(str(exc)) from None
    payload = schema.encode({k: v for k, v in event.items() if k != "metadata"})
    return Record(record, payload)
