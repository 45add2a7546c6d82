"""Cursor arithmetic on Kafka watermarks: partition views, lag, distance and shifts.

Positions are "last consumed" Kafka offsets (-1 before the first event), so
``newest - position`` is the number of events still to read, and a distance
counts events after the initial cursor up to and including the final one.
"""

from __future__ import annotations

from broker.cursors import Cursor, CursorError, position
from broker.offsets import format_offset
from broker.watermarks import Watermark


def partition_view(
    partition: int, mark: Watermark, timeline: int, consumed: int | None = None
) -> dict[str, object]:
    """Nakadi's ``Partition``: oldest / newest available offsets, and the lag after ``consumed``."""
    view: dict[str, object] = {
        "partition": str(partition),
        "oldest_available_offset": format_offset(mark.low, timeline),
        "newest_available_offset": format_offset(mark.newest_position, timeline),
    }
    if consumed is not None:
        view["unconsumed_events"] = mark.newest_position - consumed
    return view


def lag(cursor: Cursor, mark: Watermark, timeline: int, event_type: str) -> dict[str, object]:
    """The partition of ``cursor`` with the events published after it as ``unconsumed_events``."""
    return partition_view(cursor.partition, mark, timeline, position(cursor, mark, event_type))


def distance(initial: Cursor, final: Cursor, mark: Watermark, event_type: str) -> int:
    """Events after ``initial`` up to ``final``; negative when ``final`` comes first."""
    if initial.partition != final.partition:
        raise CursorError(
            "cursors with different partition. Pairs of cursors should have matching partitions."
        )
    return position(final, mark, event_type) - position(initial, mark, event_type)


def shift(cursor: Cursor, by: int, mark: Watermark, timeline: int, event_type: str) -> str:
    """The offset ``by`` events after (before, when negative) ``cursor``; it must be available."""
    target = position(cursor, mark, event_type) + by
    if not mark.oldest_position <= target <= mark.newest_position:
        raise CursorError(
            f"shifting offset {cursor.offset_text} of partition {cursor.partition_text} by {by}"
            f" leaves the available range: from {format_offset(mark.oldest_position, timeline)}"
            f" to {format_offset(mark.newest_position, timeline)}"
        )
    return format_offset(target, timeline)
