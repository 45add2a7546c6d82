"""Cursors: Nakadi's offset format, client cursors checked against Kafka, and their arithmetic.

Offsets on the wire read ``001-<timeline, 4 hex>-<kafka offset, 18 digits>``. A cursor
names the last event consumed, so reading resumes at ``offset + 1``; ``-1`` (written
``001-0001--1``) is "before the first event". ``begin`` (any case) means before the
oldest event still available, which the caller resolves against the partition's low
watermark.

Cursors from clients are ``{"partition", "offset"}`` objects; errors carry Nakadi's
texts and the endpoint decides the status (the stream answers 412, cursor operations
422, as Nakadi does).

Cursor arithmetic works on positions (:mod:`changebroker.broker.timelines.model`): the events of a
partition counted through every timeline, a cursor being the last one consumed (-1 before
the first event), so ``newest - position`` is the number of events still to read, and a
distance counts events after the initial cursor up to and including the final one. Which
positions are available comes from the watermarks of the timelines' topics (``Bounds``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from changebroker.broker.streams.watermarks import Watermark
from changebroker.broker.timelines.model import PositionError, Timelines
from changebroker.numerals import whole_number

BEGIN = "begin"
OFFSET_DIGITS = 18
# Nakadi's version of the offset format; the only one it and we write.
FORMAT_VERSION = "001"

_OFFSET = re.compile(r"^001-([0-9a-fA-F]{4})-(-1|[0-9]{1,18})$")
# Nakadi clients from before timelines send bare Kafka offsets (the manual's "12").
_LEGACY = re.compile(r"^(-1|[0-9]{1,18})$")


class OffsetFormatError(ValueError):
    """The text is neither ``begin`` nor an offset in Nakadi's format."""


@dataclass(frozen=True)
class Offset:
    """A parsed cursor offset: ``begin``, or the last consumed Kafka offset (-1 = none)."""

    kafka_offset: int | None
    timeline: int

    @property
    def is_begin(self) -> bool:
        return self.kafka_offset is None


def format_offset(kafka_offset: int, timeline: int = 1) -> str:
    """``format_offset(1)`` -> ``"001-0001-000000000000000001"``; ``-1`` -> ``"001-0001--1"``."""
    digits = "-1" if kafka_offset < 0 else f"{kafka_offset:0{OFFSET_DIGITS}d}"
    return f"{FORMAT_VERSION}-{timeline:04x}-{digits}"


def parse_offset(text: str, timeline: int = 1) -> Offset:
    """Parse a cursor's offset; a bare number is taken on ``timeline`` (legacy clients)."""
    if text.lower() == BEGIN:
        return Offset(None, timeline)
    match = _OFFSET.match(text)
    if match is not None:
        return Offset(int(match.group(2)), int(match.group(1), 16))
    if _LEGACY.match(text):
        return Offset(int(text), timeline)
    raise OffsetFormatError(text)


class CursorError(ValueError):
    """A cursor that cannot be used; ``str(error)`` says why, in Nakadi's words."""


@dataclass(frozen=True)
class Cursor:
    """A cursor as sent: the partition as a number, the offset parsed, the original texts kept."""

    partition: int
    offset: Offset
    partition_text: str
    offset_text: str


def parse_cursor(item: object, timelines: Timelines) -> Cursor:
    """One ``{"partition": "0", "offset": "..."}`` object; its partition and timeline must exist."""
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
    if not whole_number(partition_text) or int(partition_text) >= timelines.partitions:
        raise CursorError(f"non existing partition {partition_text}")
    try:
        # Offsets from before timelines name the first timeline's topic.
        offset = parse_offset(offset_text, timelines.all[0].order)
    except OffsetFormatError:
        raise CursorError(
            f"invalid cursor format, partition: {partition_text} offset: {offset_text}"
        ) from None
    if not offset.is_begin and timelines.timeline(offset.timeline) is None:
        raise CursorError(
            f"invalid cursor format, partition: {partition_text} offset: {offset_text}"
            f" (timeline {offset.timeline} does not exist; {timelines.event_type} has"
            f" timelines {timelines.all[0].order} to {timelines.active.order})"
        )
    return Cursor(int(partition_text), offset, partition_text, offset_text)


def parse_cursors(items: object, timelines: Timelines) -> list[Cursor]:
    """A JSON array of cursors, at most one per partition."""
    if not isinstance(items, list):
        raise CursorError("cursors must be a JSON array of {partition, offset} objects")
    cursors = [parse_cursor(item, timelines) for item in items]
    seen: set[int] = set()
    for cursor in cursors:
        if cursor.partition in seen:
            raise CursorError(f"partition {cursor.partition_text} appears in more than one cursor")
        seen.add(cursor.partition)
    return cursors


@dataclass(frozen=True)
class Bounds:
    """What one partition holds, through its timelines: the position before its oldest
    available event (what ``begin`` means), the position of its newest, and Nakadi's
    ``oldest_available_offset`` (the first timeline's oldest Kafka offset)."""

    oldest: int
    newest: int
    oldest_offset: str


def bounds(
    timelines: Timelines, marks: Mapping[int, Mapping[int, Watermark]], partition: int
) -> Bounds:
    """``partition``'s bounds from the watermarks of every timeline whose topic exists
    (``marks``: timeline order -> partition -> watermark)."""
    readable = timelines.readable
    oldest: int | None = None
    for timeline in readable:
        mark = marks[timeline.order][partition]
        base = timelines.base(timeline, partition)
        end = timelines.end(timeline, partition)
        last = base + mark.newest_position if end is None else end
        if base + mark.oldest_position < last:
            oldest = base + mark.oldest_position
            break
    active = timelines.active
    newest = timelines.base(active, partition) + marks[active.order][partition].newest_position
    first = readable[0]
    return Bounds(
        newest if oldest is None else oldest,
        newest,
        format_offset(marks[first.order][partition].low, first.order),
    )


def position(cursor: Cursor, timelines: Timelines, bound: Bounds, event_type: str) -> int:
    """The position of the last consumed event the cursor names, checked to be available.

    ``begin`` is just before the oldest event held; an offset before that was deleted by
    retention (or with its timeline), one past the newest event does not exist yet.
    """
    if cursor.offset.is_begin:
        return bound.oldest
    assert cursor.offset.kafka_offset is not None
    try:
        consumed = timelines.position(
            cursor.offset.timeline, cursor.offset.kafka_offset, cursor.partition
        )
    except PositionError as error:
        raise CursorError(
            f"invalid offset {cursor.offset_text} for partition {cursor.partition_text} ({error})"
        ) from None
    if consumed < bound.oldest:
        raise CursorError(
            f"offset {cursor.offset_text} for partition {cursor.partition_text} event type"
            f" {event_type} is unavailable as retention time of data elapsed."
            " PATCH partition offset with valid and available offset"
        )
    if consumed > bound.newest:
        raise CursorError(
            f"invalid offset {cursor.offset_text} for partition {cursor.partition_text}"
            " (it is past the newest event; GET the partitions for the newest offset)"
        )
    return consumed


def offset_text(timelines: Timelines, at: int, partition: int, *, latest: bool = False) -> str:
    """The cursor offset of position ``at`` (:meth:`Timelines.locate`)."""
    timeline, offset = timelines.locate(at, partition, latest=latest)
    return format_offset(offset, timeline.order)


def partition_view(
    partition: int, timelines: Timelines, bound: Bounds, consumed: int | None = None
) -> dict[str, object]:
    """Nakadi's ``Partition``: oldest / newest available offsets, and the lag after ``consumed``."""
    view: dict[str, object] = {
        "partition": str(partition),
        "oldest_available_offset": bound.oldest_offset,
        "newest_available_offset": offset_text(timelines, bound.newest, partition),
    }
    if consumed is not None:
        view["unconsumed_events"] = bound.newest - consumed
    return view


def lag(cursor: Cursor, timelines: Timelines, bound: Bounds, event_type: str) -> dict[str, object]:
    """The partition of ``cursor`` with the events published after it as ``unconsumed_events``."""
    consumed = position(cursor, timelines, bound, event_type)
    return partition_view(cursor.partition, timelines, bound, consumed)


def distance(
    initial: Cursor, final: Cursor, timelines: Timelines, bound: Bounds, event_type: str
) -> int:
    """Events after ``initial`` up to ``final``; negative when ``final`` comes first."""
    if initial.partition != final.partition:
        raise CursorError(
            "cursors with different partition. Pairs of cursors should have matching partitions."
        )
    return position(final, timelines, bound, event_type) - position(
        initial, timelines, bound, event_type
    )


def shift(cursor: Cursor, by: int, timelines: Timelines, bound: Bounds, event_type: str) -> str:
    """The offset ``by`` events after (before, when negative) ``cursor``; not before the oldest
    available event.

    As Nakadi moves a cursor: within its own timeline while the result is there (a cursor at a
    timeline's end counting as the next one's start), else forward into the first timeline
    that holds the result, backward into the last one. Forward past the newest event it goes
    on in the active timeline, to offsets not written yet, as Nakadi's does (its active
    timeline has no end to stop at).
    """
    start = position(cursor, timelines, bound, event_type)
    target = start + by
    if target > bound.newest:
        active = timelines.active
        return format_offset(target - timelines.base(active, cursor.partition), active.order)
    if target < bound.oldest:
        oldest = offset_text(timelines, bound.oldest, cursor.partition)
        newest = offset_text(timelines, bound.newest, cursor.partition)
        raise CursorError(
            f"shifting offset {cursor.offset_text} of partition {cursor.partition_text} by {by}"
            f" leaves the available range: from {oldest} to {newest}"
        )
    # ``begin`` stands in the first timeline that holds it, an offset in the last one.
    own, _ = timelines.locate(start, cursor.partition, latest=not cursor.offset.is_begin)
    if timelines.holds(own, target, cursor.partition):
        return format_offset(target - timelines.base(own, cursor.partition), own.order)
    return offset_text(timelines, target, cursor.partition, latest=by < 0)
