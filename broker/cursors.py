"""Cursors from clients: parse ``{"partition", "offset"}`` objects and check them against Kafka.

Errors carry Nakadi's texts; the endpoint decides the status (the stream
answers 412, cursor operations 422, as Nakadi does).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.offsets import Offset, OffsetFormatError, parse_offset
from broker.topics import EventTypeTopic
from broker.watermarks import Watermark


class CursorError(ValueError):
    """A cursor that cannot be used; ``str(error)`` says why, in Nakadi's words."""


@dataclass(frozen=True)
class Cursor:
    """A cursor as sent: the partition as a number, the offset parsed, the original texts kept."""

    partition: int
    offset: Offset
    partition_text: str
    offset_text: str


def parse_cursor(item: object, topic: EventTypeTopic) -> Cursor:
    """One ``{"partition": "0", "offset": "..."}`` object; its partition must exist."""
    if not isinstance(item, dict):
        raise CursorError(f"a cursor must be an object with partition and offset, got {item!r}")
    partition_text, offset_text = item.get("partition"), item.get("offset")
    if partition_text is None:
        raise CursorError("partition must not be null")
    if offset_text is None:
        raise CursorError("offset must not be null")
    if not isinstance(partition_text, str) or not isinstance(offset_text, str):
        raise CursorError(
            f"invalid cursor format, partition: {partition_text} offset: {offset_text}"
            " (both are strings)"
        )
    if not partition_text.isdigit() or int(partition_text) >= topic.partitions:
        raise CursorError(f"non existing partition {partition_text}")
    try:
        offset = parse_offset(offset_text, topic.timeline)
    except OffsetFormatError:
        raise CursorError(
            f"invalid cursor format, partition: {partition_text} offset: {offset_text}"
        ) from None
    if offset.timeline != topic.timeline:
        raise CursorError(
            f"invalid cursor format, partition: {partition_text} offset: {offset_text}"
            f" (timeline {offset.timeline} does not exist; the current one is {topic.timeline})"
        )
    return Cursor(int(partition_text), offset, partition_text, offset_text)


def parse_cursors(items: object, topic: EventTypeTopic) -> list[Cursor]:
    """A JSON array of cursors, at most one per partition."""
    if not isinstance(items, list):
        raise CursorError("cursors must be a JSON array of {partition, offset} objects")
    cursors = [parse_cursor(item, topic) for item in items]
    seen: set[int] = set()
    for cursor in cursors:
        if cursor.partition in seen:
            raise CursorError(f"partition {cursor.partition_text} appears in more than one cursor")
        seen.add(cursor.partition)
    return cursors


def position(cursor: Cursor, watermark: Watermark, event_type: str) -> int:
    """The Kafka offset of the last consumed event the cursor names, checked to be available.

    ``begin`` is just before the oldest event held; an offset before that was
    deleted by retention, one past the newest event does not exist yet.
    """
    if cursor.offset.is_begin:
        return watermark.oldest_position
    assert cursor.offset.kafka_offset is not None
    consumed = cursor.offset.kafka_offset
    if consumed < watermark.oldest_position:
        raise CursorError(
            f"offset {cursor.offset_text} for partition {cursor.partition_text} event type"
            f" {event_type} is unavailable as retention time of data elapsed."
            " PATCH partition offset with valid and available offset"
        )
    if consumed > watermark.newest_position:
        raise CursorError(
            f"invalid offset {cursor.offset_text} for partition {cursor.partition_text}"
            " (it is past the newest event; GET the partitions for the newest offset)"
        )
    return consumed
