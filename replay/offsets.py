"""What each run reads: per partition, from the base snapshot's cursor to the end ``--until``
names, as Kafka offsets (first to read, end exclusive).

Nakadi cursors name the last event consumed (broker/streams/cursors.py), so a cursor ``c`` starts a
read at ``c + 1`` and, as an end, includes ``c``. Kafka offsets of a transactional topic have
gaps (commit markers); a cursor may name one, which is harmless: it still says "everything up
to here". Ends are at most the partition's last stable offset (what ``read_committed``
readers can see); a given end beyond it is waited for, since the transaction that wrote it
may not be committed yet.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import OffsetSpec

from changebroker import kafka
from changebroker.broker.streams.cursors import OffsetFormatError, format_offset, parse_offset
from changebroker.replay.catalog import SpecTimeline, TableSpec
from changebroker.replay.snapshots import Cursors


class RangeError(Exception):
    """The asked-for range cannot be read exactly; the message says why and what to do."""


@dataclass(frozen=True)
class Until:
    """``--until``: ``latest``, a moment, or Nakadi cursors per event type."""

    latest: bool = False
    moment: datetime | None = None
    cursors: Cursors | None = None

    def describe(self) -> str:
        if self.latest:
            return "latest"
        if self.moment is not None:
            return self.moment.isoformat()
        return "given cursors"


def parse_until(text: str) -> Until:
    """``latest``, an ISO 8601 time with offset, or ``{"event type": [cursors]}`` JSON."""
    text = text.strip()
    if text == "latest":
        return Until(latest=True)
    if text.startswith("{"):
        try:
            cursors = json.loads(text)
        except ValueError as exc:
            raise RangeError(f"--until: cursors are not JSON: {exc}") from None
        if not isinstance(cursors, dict) or not all(isinstance(v, list) for v in cursors.values()):
            raise RangeError(
                '--until: cursors are {"<event type>": [{"partition": "0", "offset": "..."}]}'
            )
        return Until(cursors=cursors)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise RangeError(
            f"--until {text!r}: use latest, an ISO 8601 time (2026-11-23T14:05:00Z) or cursors"
            ' JSON ({"<event type>": [{"partition": "0", "offset": "001-0001-..."}]})'
        ) from None
    if moment.tzinfo is None:
        raise RangeError(f"--until {text!r}: give the time zone (Z or +hh:mm)")
    return Until(moment=moment)


@dataclass(frozen=True)
class PartitionRange:
    partition: int
    start: int  # the first offset to read
    end: int  # exclusive: the snapshot holds every committed event below it
    timeline: int = 1  # the order of the timeline whose topic the offsets are in

    @property
    def size(self) -> int:
        return self.end - self.start


def cursor_offset(end: int, timeline: int) -> str:
    """The Nakadi cursor of everything below ``end``: its last offset (``-1``: nothing)."""
    return format_offset(end - 1, timeline)


def cursors_of(spec: TableSpec, ranges: Sequence[PartitionRange]) -> list[dict[str, str]]:
    """Per partition, the cursor of where its last range ends."""
    last: dict[int, PartitionRange] = {}
    for r in ranges:
        if r.partition not in last or r.timeline > last[r.partition].timeline:
            last[r.partition] = r
    return [
        {"partition": str(p), "offset": cursor_offset(r.end, r.timeline)}
        for p, r in sorted(last.items())
    ]


# Where reading starts or ends in one partition: a timeline's order and a Kafka offset in its
# topic (None: the oldest it still holds).
Place = tuple[int, int | None]


def _places(cursors: Sequence[Mapping[str, str]], spec: TableSpec, what: str) -> dict[int, Place]:
    """Partition -> the place after each cursor's offset (``BEGIN``: the first timeline's
    oldest)."""
    out: dict[int, Place] = {}
    first = spec.timelines[0].order
    for cursor in cursors:
        try:
            partition = int(cursor["partition"])
            offset = parse_offset(cursor["offset"], first)
        except (KeyError, ValueError, OffsetFormatError):
            raise RangeError(f"{what}: {cursor!r} is not a cursor of {spec.event_type}") from None
        if offset.is_begin:
            out[partition] = (first, None)
            continue
        assert offset.kafka_offset is not None
        if spec.timeline(offset.timeline) is None:
            raise RangeError(
                f"{what}: {cursor!r} names timeline {offset.timeline}, which"
                f" {spec.event_type} does not have"
            )
        out[partition] = (offset.timeline, offset.kafka_offset + 1)
    return out


class Watermarks:
    """Kafka's view of a topic's partitions, as a ``read_committed`` reader sees them."""

    def __init__(self, bootstrap: str) -> None:
        self._admin = kafka.admin(bootstrap)

    def _list(self, topic: str, partitions: int, spec: OffsetSpec) -> dict[int, int]:
        request = {TopicPartition(topic, p): spec for p in range(partitions)}
        futures = self._admin.list_offsets(
            request, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=30
        )
        return {tp.partition: future.result().offset for tp, future in futures.items()}

    def earliest(self, topic: str, partitions: int) -> dict[int, int]:
        return self._list(topic, partitions, OffsetSpec.earliest())

    def last_stable(self, topic: str, partitions: int) -> dict[int, int]:
        return self._list(topic, partitions, OffsetSpec.latest())

    def at(self, topic: str, partitions: int, moment: datetime) -> dict[int, int]:
        """The first offset written at or after ``moment`` (``-1``: none yet)."""
        millis = int(moment.timestamp() * 1000)
        return self._list(topic, partitions, OffsetSpec.for_timestamp(millis))


def plan(
    spec: TableSpec,
    base: Sequence[Mapping[str, str]] | None,
    until: Until,
    watermarks: Callable[[SpecTimeline], Watermarks],
    wait_seconds: float = 60.0,
    written: Mapping[str, Mapping[int, int]] | None = None,
) -> list[PartitionRange]:
    """The ranges of every partition of ``spec``'s event type: after ``base`` (or from the
    first timeline's beginning) up to ``until``, through every timeline between (a closed
    one read to its end); ``latest`` ends after ``written`` (per topic, the last offset the
    bridge's newest position record names, replay/positions.py) where given, else at the
    active timeline's last stable offsets. ``watermarks``: of a timeline's cluster."""
    first = spec.timelines[0].order
    starts: dict[int, Place] = {p: (first, 0) for p in range(spec.partitions)}
    if base is not None:
        starts.update(_places(base, spec, "the base snapshot's cursors"))
    ends = _ends(spec, until, watermarks, written)
    active = spec.active
    stable = _stable(spec, active, watermarks)
    deadline = time.monotonic() + wait_seconds
    while any(order == active.order and (end or 0) > stable[p] for p, (order, end) in ends.items()):
        if time.monotonic() >= deadline:
            break
        time.sleep(0.2)  # a transaction the end lies in is still open
        stable = _stable(spec, active, watermarks)
    earliest: dict[int, dict[int, int]] = {}  # timeline order -> partition -> offset

    def oldest(timeline: SpecTimeline, partition: int) -> int:
        if timeline.gone:
            return 0
        if timeline.order not in earliest:
            found = watermarks(timeline).earliest(timeline.topic, spec.partitions)
            earliest[timeline.order] = found
        return earliest[timeline.order][partition]

    ranges = []
    for p in range(spec.partitions):
        (start_order, start), (end_order, end) = starts[p], ends[p]
        where = f"partition {p} of event type {spec.event_type} (table {spec.table})"
        if (end_order, end or 0) < (start_order, start or 0):
            raise RangeError(
                f"{where}: --until ends before the base snapshot's cursor; give --full or an"
                " older --base"
            )
        for timeline in spec.timelines:
            if not start_order <= timeline.order <= end_order:
                continue
            held = oldest(timeline, p)
            first_offset = 0
            if timeline.order == start_order:
                first_offset = held if start is None else start
            closed = timeline.end(p)
            if timeline.order == end_order:
                last = held if end is None else end
            else:
                assert closed is not None, "only the active timeline has no end"
                last = closed
            if closed is None and last > stable[p]:
                raise RangeError(
                    f"{where}: --until names offset {last - 1}, but committed events end at"
                    f" {stable[p] - 1} after {wait_seconds:.0f}s"
                )
            if last > first_offset and (timeline.gone or first_offset < held):
                gone = "that timeline" if timeline.gone else f"everything before {held}"
                raise RangeError(
                    f"{where}: events from offset {first_offset} of timeline {timeline.order}"
                    f" on are needed, but retention deleted {gone}; replay from a snapshot"
                    " newer than that (or raise the event type's retention_time)"
                )
            # An empty range is kept where reading ends: the snapshot's cursor is there.
            if last > first_offset or timeline.order == end_order:
                ranges.append(
                    PartitionRange(p, first_offset, max(last, first_offset), timeline.order)
                )
    return ranges


def _stable(
    spec: TableSpec, active: SpecTimeline, watermarks: Callable[[SpecTimeline], Watermarks]
) -> dict[int, int]:
    return watermarks(active).last_stable(active.topic, spec.partitions)


def _ends(
    spec: TableSpec,
    until: Until,
    watermarks: Callable[[SpecTimeline], Watermarks],
    written: Mapping[str, Mapping[int, int]] | None,
) -> dict[int, Place]:
    active = spec.active
    if until.cursors is not None:
        cursors = until.cursors.get(spec.event_type)
        if cursors is None:
            raise RangeError(
                f"--until cursors name no partition of {spec.event_type} (table {spec.table})"
            )
        given = _places(cursors, spec, "--until")
        missing = set(range(spec.partitions)) - set(given)
        if missing:
            raise RangeError(
                f"--until cursors of {spec.event_type} miss partitions"
                f" {', '.join(map(str, sorted(missing)))}"
            )
        return given
    stable = _stable(spec, active, watermarks)
    if until.moment is not None:
        ends: dict[int, Place] = {}
        for timeline in spec.timelines:
            if timeline.gone:
                continue
            found = watermarks(timeline).at(timeline.topic, spec.partitions, until.moment)
            for p, offset in found.items():
                if p in ends:
                    continue
                closed = timeline.end(p)
                if closed is None:
                    ends[p] = (timeline.order, stable[p] if offset < 0 else min(offset, stable[p]))
                elif 0 <= offset < closed:
                    ends[p] = (timeline.order, offset)
        return ends
    latest = dict(stable)
    if written is not None:
        latest.update({p: o + 1 for p, o in written.get(active.topic, {}).items() if p in latest})
    return {p: (active.order, offset) for p, offset in latest.items()}
