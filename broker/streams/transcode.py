"""What a stream sends of each stored event, in the format its reader asked for.

Kafka holds JSON events as their JSON and Avro events as Nakadi's envelope (a
``Envelope`` single-object message, :mod:`changebroker.broker.avro.envelope`); a tombstone of
``deleted-events`` has no value and is never sent (the batcher skips it). A JSON stream sends
an Avro event as the JSON object of its payload with its metadata; an Avro stream
(``Accept: application/avro-binary``) sends an Avro event's envelope as stored and a JSON
event as an envelope whose payload is written with the event type's newest ``avro_schema``.
Each poll's messages are rewritten in place (``Message.set_value``) before they are batched;
a JSON-only stream costs one look at each event's first byte.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
from confluent_kafka import Message

from changebroker.broker.avro import envelope
from changebroker.broker.avro.payloads import PayloadError, PayloadSchema, avro_record, json_event
from changebroker.broker.avro.schemas import AvroSchemas, EventSchemas
from changebroker.broker.timelines.model import Timelines

AVRO_MEDIA_TYPE = "application/avro-binary"
_AVRO_FIRST_BYTE = envelope.MARKER[0]


class Unrepresentable(Exception):
    """A stored event the stream's format cannot carry; the message says which and why."""


def wants_avro(accept: str | None) -> bool:
    """Whether the reader's first media type is Avro, as Nakadi reads ``Accept``."""
    first = (accept or "").split(",", 1)[0].split(";", 1)[0].strip().lower()
    return first == AVRO_MEDIA_TYPE


class Transcoder:
    """Rewrites the events a stream reads of its event types (``timelines``) for its format.

    An event is looked up by its topic: every timeline's topic names its event type, the
    topics of timelines a switch adds while the stream runs too, once the stream follows them
    (:meth:`follow`)."""

    def __init__(self, avro: AvroSchemas, timelines: Iterable[Timelines], *, binary: bool) -> None:
        self._avro = avro
        self._names: dict[str, str] = {}
        self.binary = binary
        for each in timelines:
            self.follow(each)

    def follow(self, timelines: Timelines) -> None:
        """The event type's timelines as the stream reads them now."""
        for timeline in timelines.all:
            self._names[timeline.topic] = timelines.event_type

    async def __call__(self, messages: list[Message]) -> None:
        for message in messages:
            value = message.value()
            if not value:
                continue
            if self.binary:
                await self._to_avro(message, value)
            elif value[0] == _AVRO_FIRST_BYTE and envelope.is_envelope(value):
                await self._to_json(message, value)

    async def json_of(self, message: Message) -> Any:
        """A rewritten message's event as JSON (what the dead-letter queue keeps of it)."""
        value = message.value()
        assert value is not None
        if not self.binary:
            return orjson.loads(value)
        record = envelope.read_datum(value)
        schema = await self._version(message, record.metadata["version"])
        return orjson.loads(json_event(record, schema))

    async def _schemas(self, message: Message) -> tuple[str, EventSchemas]:
        name = self._names[message.topic()]  # type: ignore[index]
        found = await self._avro.of(name)
        if found is None:
            raise Unrepresentable(f"event type {name} no longer exists")
        return name, found

    async def _version(self, message: Message, version: str) -> PayloadSchema:
        name, schemas = await self._schemas(message)
        schema = schemas.versions.get(version)
        if schema is None:
            schemas = await self._avro.of(name, fresh=True) or schemas
            schema = schemas.versions.get(version)
        if schema is None:
            raise Unrepresentable(f"event type {name} has no avro_schema version {version}")
        return schema

    async def _to_json(self, message: Message, value: bytes) -> None:
        record = envelope.read_stored(value)
        schema = await self._version(message, record.metadata["version"])
        message.set_value(json_event(record, schema))

    async def _to_avro(self, message: Message, value: bytes) -> None:
        if envelope.is_envelope(value):
            message.set_value(envelope.envelope_datum(value))
            return
        name, schemas = await self._schemas(message)
        where = f"event {message.offset()} of partition {message.partition()} of {name}"
        if schemas.latest is None:
            raise Unrepresentable(
                f"{where} is JSON and {name} has no avro_schema to write it with: read the"
                " subscription as JSON"
            )
        try:
            record = avro_record(orjson.loads(value), schemas.latest)
            message.set_value(envelope.datum(record.metadata, record.payload))
        except (PayloadError, orjson.JSONDecodeError, TypeError) as exc:
            raise Unrepresentable(
                f"{where} does not fit avro_schema {schemas.latest.version}: {exc}"
            ) from None
