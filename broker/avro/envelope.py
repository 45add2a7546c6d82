"""Nakadi's Avro envelope: how ``application/avro-binary`` batches and stored events look.

A publishing batch is one ``PublishingBatch`` record, a subscription stream a sequence of
``ConsumptionBatch`` records, and an Avro event is kept in Kafka as one ``Envelope``: each in
Avro's single-object encoding (``C3 01``, the CRC-64-AVRO fingerprint of the writer schema's
parsing canonical form, little-endian, then the binary datum), so a reader tells the schema
version from the fingerprint. An envelope holds the event's metadata as a record and its
payload as bytes written with the event type's own Avro schema of ``metadata.version``.

The records' names, fields and types are Nakadi's (its envelope schemas, versions 0 and 1;
``docs/nakadi-differences.md`` lists what the broker adds to them). Version 0 lacks
``event_owner``; batches of either version are read, the broker writes version 1.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from changebroker.broker.avro import wire

NAMESPACE = "org.zalando.nakadi.generated.avro"
# Avro's single-object encoding starts every message with these two bytes.
MARKER = b"\xc3\x01"
_HEADER = len(MARKER) + 8

_NULLABLE_STRING: list[Any] = ["null", "string"]
_TIMESTAMP_MILLIS = {"type": "long", "logicalType": "timestamp-millis"}


def _metadata(name: str, *, event_owner: bool) -> dict[str, Any]:
    fields: list[dict[str, Any]] = [
        {"name": "occurred_at", "type": _TIMESTAMP_MILLIS},
        {"name": "eid", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "flow_id", "type": _NULLABLE_STRING, "default": None},
        {"name": "received_at", "type": ["null", _TIMESTAMP_MILLIS], "default": None},
        {"name": "version", "type": "string"},
        {"name": "published_by", "type": _NULLABLE_STRING, "default": None},
        {"name": "event_type", "type": "string"},
        {"name": "partition", "type": _NULLABLE_STRING, "default": None},
        {
            "name": "partition_keys",
            "type": ["null", {"type": "array", "items": "string"}],
            "default": None,
        },
        {"name": "partition_compaction_key", "type": _NULLABLE_STRING, "default": None},
        {
            "name": "parent_eids",
            "type": [
                "null",
                {"type": "array", "items": {"type": "string", "logicalType": "uuid"}},
            ],
            "default": None,
        },
        {"name": "span_ctx", "type": _NULLABLE_STRING, "default": None},
    ]
    if event_owner:
        fields.append({"name": "event_owner", "type": _NULLABLE_STRING, "default": None})
    return {"name": name, "type": "record", "fields": fields}


def _envelope(version: int) -> dict[str, Any]:
    suffix = "" if version else "V0"
    return {
        "name": f"Envelope{suffix}",
        "namespace": NAMESPACE,
        "type": "record",
        "fields": [
            {"name": "metadata", "type": _metadata(f"Metadata{suffix}", event_owner=bool(version))},
            {"name": "payload", "type": "bytes"},
        ],
    }


def _publishing_batch(version: int) -> dict[str, Any]:
    suffix = "" if version else "V0"
    return {
        "name": f"PublishingBatch{suffix}",
        "namespace": NAMESPACE,
        "type": "record",
        "fields": [{"name": "events", "type": {"type": "array", "items": _envelope(version)}}],
    }


def _consumption_batch(version: int) -> dict[str, Any]:
    suffix = "" if version else "V0"
    cursor = {
        "name": "SubscriptionCursor",
        "type": "record",
        "fields": [
            {"name": name, "type": "string"}
            for name in ("partition", "offset", "event_type", "cursor_token")
        ],
    }
    return {
        "name": f"ConsumptionBatch{suffix}",
        "namespace": NAMESPACE,
        "type": "record",
        "fields": [
            {"name": "cursor", "type": cursor},
            {"name": "info", "type": _NULLABLE_STRING, "default": None},
            {"name": "events", "type": {"type": "array", "items": _envelope(version)}},
        ],
    }


# Nakadi's schemas by name and version, as its /avro-schemas answers them.
SCHEMAS: dict[str, dict[str, dict[str, Any]]] = {
    "envelope": {str(v): _envelope(v) for v in (0, 1)},
    "batch.publishing": {str(v): _publishing_batch(v) for v in (0, 1)},
    "batch.consumption": {str(v): _consumption_batch(v) for v in (0, 1)},
}


def plain(schema: Any) -> Any:
    """``schema`` without logical types: values read as their Avro types (a timestamp as its
    long, a uuid as its string), as Nakadi's readers see them; the same bytes on the wire."""
    if isinstance(schema, Mapping):
        return {k: plain(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [plain(item) for item in schema]
    return schema


def single_object_header(schema: Mapping[str, Any]) -> bytes:
    """The marker and the schema's fingerprint that begin each of its single-object messages."""
    canonical = to_parsing_canonical_form(dict(schema))
    return MARKER + bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))


@dataclass(frozen=True)
class Codec:
    """One schema: its single-object header and its compiled (plain) form."""

    header: bytes
    parsed: Any

    @classmethod
    def of(cls, schema: Mapping[str, Any]) -> Codec:
        return cls(single_object_header(schema), fastavro.parse_schema(plain(schema)))

    def datum(self, record: Any) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, self.parsed, record)
        return out.getvalue()

    def message(self, record: Any) -> bytes:
        """``record`` in single-object encoding."""
        return self.header + self.datum(record)


_HEADERS = {
    single_object_header(SCHEMAS["envelope"]["1"]): wire.METADATA,
    single_object_header(SCHEMAS["envelope"]["0"]): wire.METADATA_V0,
}
_PUBLISHING_HEADERS = {
    single_object_header(SCHEMAS["batch.publishing"]["1"]): wire.METADATA,
    single_object_header(SCHEMAS["batch.publishing"]["0"]): wire.METADATA_V0,
}
ENVELOPE_HEADER = single_object_header(SCHEMAS["envelope"]["1"])
CONSUMPTION_HEADER = single_object_header(SCHEMAS["batch.consumption"]["1"])


class EnvelopeError(ValueError):
    """Bytes that are not the envelope record they should be; the message says why."""


@dataclass(frozen=True)
class Record:
    """One event of an Avro batch: its metadata (the Metadata record's fields, timestamps in
    milliseconds) and its payload, written with the event type's schema of its version."""

    metadata: dict[str, Any]
    payload: bytes


def _fields(headers: Mapping[bytes, tuple[tuple[str, str], ...]], data: bytes, what: str) -> Any:
    fields = headers.get(data[:_HEADER])
    if fields is None:
        raise EnvelopeError(
            f"the {what} is not in Avro single-object encoding of one of Nakadi's {what} schemas"
            " (C3 01 and the schema's CRC-64-AVRO fingerprint, then the datum)"
        )
    return fields


def _record(reader: wire.Reader, fields: tuple[tuple[str, str], ...]) -> Record:
    return Record(reader.metadata(fields), reader.raw())


def _whole(reader: wire.Reader, what: str) -> None:
    if reader.pos != len(reader.data):
        raise EnvelopeError(f"the {what} has {len(reader.data) - reader.pos} bytes after its datum")


def read_publishing_batch(data: bytes) -> list[Record]:
    """The events of a ``PublishingBatch`` message (version 0 or 1)."""
    fields = _fields(_PUBLISHING_HEADERS, data, "publishing batch")
    reader = wire.Reader(data, _HEADER)
    records: list[Record] = []
    try:
        while count := reader.long():
            if count < 0:  # a block with its size in bytes first
                count = -count
                reader.long()
            records += [_record(reader, fields) for _ in range(count)]
    except wire.WireError as exc:
        raise EnvelopeError(f"the publishing batch is not a valid Avro datum: {exc}") from None
    _whole(reader, "publishing batch")
    return records


def publishing_batch(records: Iterable[Record]) -> bytes:
    """A ``PublishingBatch`` (version 1) message of ``records``: what a client sends, written
    with fastavro (the broker reads it by hand)."""
    batch = {"events": [{"metadata": r.metadata, "payload": r.payload} for r in records]}
    return Codec.of(SCHEMAS["batch.publishing"]["1"]).message(batch)


def is_envelope(value: bytes) -> bool:
    """Whether a stored event is an Avro envelope (JSON events start with ``{``)."""
    return value[:2] == MARKER


def datum(metadata: Mapping[str, Any], payload: bytes) -> bytes:
    """An ``Envelope`` (version 1) datum: an item of a consumption batch's ``events``."""
    return wire.metadata(metadata) + wire.raw(payload)


def stored(metadata: Mapping[str, Any], payload: bytes) -> bytes:
    """An event as Kafka keeps it: one ``Envelope`` (version 1) message."""
    return ENVELOPE_HEADER + datum(metadata, payload)


def read_datum(value: bytes) -> Record:
    """The metadata and payload of an ``Envelope`` (version 1) datum."""
    return _record(wire.Reader(value), wire.METADATA)


def read_stored(value: bytes) -> Record:
    """The metadata and payload of a stored envelope."""
    reader = wire.Reader(value, _HEADER)
    try:
        record = _record(reader, _fields(_HEADERS, value, "envelope"))
    except wire.WireError as exc:
        raise EnvelopeError(f"the envelope is not a valid Avro datum: {exc}") from None
    _whole(reader, "envelope")
    return record


def envelope_datum(value: bytes) -> bytes:
    """A stored envelope's datum: an item of a consumption batch's ``events`` as it is."""
    return value[_HEADER:]


def consumption_batch(cursor: Mapping[str, str], info: str | None, envelopes: list[bytes]) -> bytes:
    """A ``ConsumptionBatch`` (version 1) message: the cursor, the info and the envelopes'
    datums spliced in as they are stored (no event is decoded on the way out)."""
    out = [CONSUMPTION_HEADER]
    out += [wire.string(cursor[k]) for k in ("partition", "offset", "event_type", "cursor_token")]
    out.append(b"\x00" if info is None else b"\x02" + wire.string(info))
    if envelopes:
        out.append(wire.long(len(envelopes)))
        out += envelopes
    out.append(b"\x00")
    return b"".join(out)


def read_consumption_batches(data: bytes) -> list[dict[str, Any]]:
    """Every ``ConsumptionBatch`` of a binary stream's bytes: what a client reads, with
    fastavro (the broker writes them by hand)."""
    codec = Codec.of(SCHEMAS["batch.consumption"]["1"])
    body = io.BytesIO(data)
    batches: list[dict[str, Any]] = []
    while body.tell() < len(data):
        header = body.read(_HEADER)
        if header != codec.header:
            raise EnvelopeError(f"a consumption batch starts with {header.hex()}")
        batches.append(dict(fastavro.schemaless_reader(body, codec.parsed, None)))  # type: ignore[arg-type]
    return batches
