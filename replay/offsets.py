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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import OffsetSpec

from broker.streams.cursors import OffsetFormatError, format_offset, parse_offset
from changebroker import kafka
from replay.catalog import TableSpec
from replay.snapshots import Cursors


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

    @property
    def size(self) -> int:
        return self.end - self.start


def cursor_offset(end: int, timeline: int) -> str:
    """The Nakadi cursor of everything below ``end``: its last offset (``-1``: nothing)."""
    return format_offset(end - 1, timeline)


def cursors_of(spec: TableSpec, ranges: Sequence[PartitionRange]) -> list[dict[str, str]]:
    return [
        {"partition": str(r.partition), "offset": cursor_offset(r.end, spec.timeline)}
        for r in ranges
    ]


def _offsets(cursors: Sequence[Mapping[str, str]], spec: TableSpec, what: str) -> dict[int, int]:
    """Partition -> the offset after each cursor's (``None`` for ``BEGIN``: the oldest kept)."""
    out: dict[int, int] = {}
    for cursor in cursors:
        try:
            partition = int(cursor["partition"])
            offset = parse_offset(cursor["offset"], spec.timeline)
        except (KeyError, ValueError, OffsetFormatError):
            raise RangeError(f"{what}: {cursor!r} is not a cursor of {spec.event_type}") from None
        if offset.is_begin:
            out[partition] = -1
        else:
            assert offset.kafka_offset is not None
            out[partition] = offset.kafka_offset + 1
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
    watermarks: Watermarks,
    wait_seconds: float = 60.0,
    written: Mapping[int, int] | None = None,
) -> list[PartitionRange]:
    """The range of every partition of ``spec``'s topic: after ``base`` (or from offset 0)
    up to ``until``; ``latest`` ends after ``written`` (the last offset the bridge's newest
    position record names, replay/positions.py) where given, else at the last stable one."""
    earliest = watermarks.earliest(spec.topic, spec.partitions)
    stable = watermarks.last_stable(spec.topic, spec.partitions)
    starts = {p: 0 for p in range(spec.partitions)}
    if base is not None:
        given = _offsets(base, spec, "the base snapshot's cursors")
        starts.update({p: earliest[p] if o < 0 else o for p, o in given.items()})
    ends = _ends(spec, until, watermarks, stable, earliest)
    if until.latest and written is not None:
        ends.update({p: offset + 1 for p, offset in written.items() if p in ends})
    deadline = time.monotonic() + wait_seconds
    while any(ends[p] > stable[p] for p in ends) and time.monotonic() < deadline:
        time.sleep(0.2)  # a transaction the end lies in is still open
        stable = watermarks.last_stable(spec.topic, spec.partitions)
    ranges = []
    for p in range(spec.partitions):
        start, end = starts[p], ends[p]
        where = f"partition {p} of event type {spec.event_type} (table {spec.table})"
        if end > stable[p]:
            raise RangeError(
                f"{where}: --until names offset {end - 1}, but committed events end at"
                f" {stable[p] - 1} after {wait_seconds:.0f}s"
            )
        if start < earliest[p] and end > start:
            raise RangeError(
                f"{where}: events from offset {start} on are needed, but retention deleted"
                f" everything before {earliest[p]}; replay from a snapshot newer than that"
                " (or raise the event type's retention_time)"
            )
        if end < start:
            raise RangeError(
                f"{where}: --until ends at offset {end - 1}, before the base snapshot's cursor"
                f" {start - 1}; give --full or an older --base"
            )
        ranges.append(PartitionRange(p, start, end))
    return ranges


def _ends(
    spec: TableSpec,
    until: Until,
    watermarks: Watermarks,
    stable: dict[int, int],
    earliest: dict[int, int],
) -> dict[int, int]:
    if until.cursors is not None:
        cursors = until.cursors.get(spec.event_type)
        if cursors is None:
            raise RangeError(
                f"--until cursors name no partition of {spec.event_type} (table {spec.table})"
            )
        given = _offsets(cursors, spec, "--until")
        missing = set(range(spec.partitions)) - set(given)
        if missing:
            raise RangeError(
                f"--until cursors of {spec.event_type} miss partitions"
                f" {', '.join(map(str, sorted(missing)))}"
            )
        return {p: earliest[p] if o < 0 else o for p, o in given.items()}
    if until.moment is not None:
        found = watermarks.at(spec.topic, spec.partitions, until.moment)
        return {p: stable[p] if o < 0 else min(o, stable[p]) for p, o in found.items()}
    return dict(stable)
