"""``application/avro-binary`` publishing and deleting: Nakadi's ``PublishingBatch`` of envelopes.

Each envelope is checked as Nakadi checks it, in its order: its ``metadata.event_type`` names
the event type posted to and its ``metadata.version`` is one of the type's ``avro_schema``
versions; its payload is a record of that version (the broker decodes it, Nakadi does not:
a JSON reader could not read it otherwise) or, to delete, empty; the partition (the strategy
over the metadata's ``partition`` or ``partition_keys``); enrichment (``received_at``, and
``flow_id`` from X-Flow-Id when the envelope has none). The first envelope that fails fails
the batch, nothing is written, and the answer is 207 with each item's status, as Nakadi's
binary endpoint answers (its JSON one answers 422).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from changebroker.broker.avro import envelope
from changebroker.broker.avro.envelope import EnvelopeError, Record
from changebroker.broker.avro.payloads import PayloadError, PayloadSchema
from changebroker.broker.bodies import BadBody
from changebroker.broker.publishing.partitioning import PartitioningError
from changebroker.broker.publishing.pipeline import Target
from changebroker.broker.publishing.producer import Message

MEDIA_TYPE = "application/avro-binary"
# An Avro event is measured as its payload: Nakadi's limit for an event.
MAX_PAYLOAD_BYTES = 999_000


_MEDIA_TYPE = MEDIA_TYPE.encode()


def is_avro(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether the request's (raw, ASGI) headers say its body is Avro binary: a scan of a few
    headers, as the JSON publishing path asks it too."""
    for key, value in headers:
        if key == b"content-type":
            return value.split(b";", 1)[0].strip().lower() == _MEDIA_TYPE
    return False


def records(body: bytes) -> list[Record]:
    """The envelopes of a ``PublishingBatch``; 400 when the body is not one."""
    try:
        return envelope.read_publishing_batch(body)
    except EnvelopeError as exc:
        raise BadBody(str(exc)) from None


class RecordFailure(Exception):
    """An envelope the broker refuses; the message is its item's detail."""


def check_version(name: str, avro: Mapping[str, PayloadSchema], record: Record) -> PayloadSchema:
    """The payload schema of the record's version; RecordFailure names what is wrong."""
    metadata = record.metadata
    if metadata["event_type"] != name:
        raise RecordFailure("event type does not match")
    version = metadata["version"]
    schema = avro.get(version)
    if schema is None:
        raise RecordFailure(f'EventType "{name}" has no avro_schema with version "{version}"')
    return schema


def message(
    target: Target,
    record: Record,
    *,
    delete: bool,
    received_ms: int,
    flow_id: str | None,
) -> Message:
    """One envelope checked, partitioned, enriched and encoded; RecordFailure says why it
    cannot be."""
    schema = check_version(target.name, target.avro, record)
    metadata = dict(record.metadata)
    if delete:
        if record.payload:
            raise RecordFailure("Payload must be empty to delete events.")
    else:
        if len(record.payload) > MAX_PAYLOAD_BYTES:
            raise RecordFailure(
                f"Event too large: {len(record.payload)} bytes, the limit is"
                f" {MAX_PAYLOAD_BYTES} bytes"
            )
        try:
            schema.decode(record.payload)
        except PayloadError as exc:
            raise RecordFailure(str(exc)) from None
    try:
        partition = target.metadata_partition(metadata)
    except PartitioningError as exc:
        raise RecordFailure(str(exc)) from None
    metadata["partition"] = str(partition)
    key = None
    if target.compacted:
        compaction_key = metadata.get("partition_compaction_key")
        if not compaction_key:
            raise RecordFailure(
                "metadata.partition_compaction_key is required: the event type is compacted"
            )
        key = compaction_key.encode()
    if delete:
        return Message(target.topic, partition, key, None)
    if target.enriched:
        metadata["received_at"] = received_ms
        if not metadata.get("flow_id") and flow_id:
            metadata["flow_id"] = flow_id
    return Message(target.topic, partition, key, envelope.stored(metadata, record.payload))


def items(
    batch: Sequence[Record],
    failed: int | None = None,
    detail: str = "",
    errors: Sequence[str | None] = (),
) -> list[dict[str, Any]]:
    """Nakadi's 207 body for an Avro batch: each item's status at step ``publishing``; the one
    that ``failed`` (index) and those after it aborted, or per item Kafka's ``errors``."""
    out = []
    for index, record in enumerate(batch):
        status, said = "submitted", ""
        if failed is not None:
            status = "failed" if index == failed else "aborted"
            said = detail if index == failed else ""
        elif errors and errors[index]:
            status, said = "failed", str(errors[index])
        out.append(
            {
                "eid": record.metadata["eid"],
                "publishing_status": status,
                "step": "publishing",
                "detail": said,
            }
        )
    return out
