"""Taking a snapshot of a feed's selectors: ``GET /snapshots`` in transicator's protobuf
snapshot stream, decoded as it arrives, and handed out row by row.

The stream (changebroker/transicator.proto) is messages each behind a 4-byte big-endian
length: a ``SnapshotHeaderPb``, then per table a ``StreamMessagePb`` with its
``TableHeaderPb`` followed by one per row with its ``RowPb``. Protobuf, not JSON, because
it can be read message by message: a snapshot's size never sits in memory. Its sequence
and id are the ``X-Snapshot-Sequence`` and ``X-Snapshot-Id`` headers; the snapshot holds
exactly the changes up to that sequence (README "Snapshots").
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import httpx

from changebroker import transicator_pb2 as pb
from changebroker.client.backoff import exchange
from changebroker.client.effects import (
    Call,
    Close,
    Effect,
    Emit,
    Failure,
    Open,
    Read,
    Sleep,
)
from changebroker.client.errors import ChangeFeedError, SnapshotUnavailable
from changebroker.client.model import Column, SnapshotEnd, SnapshotRow, SnapshotStart, from_protobuf
from changebroker.client.positions import Position
from changebroker.client.wire import PROTOBUF, Refusal

if TYPE_CHECKING:
    from changebroker.client.changes import FeedRun

log = logging.getLogger("changebroker.client")

SEQUENCE_HEADER = "X-Snapshot-Sequence"
ID_HEADER = "X-Snapshot-Id"
# The longest wait for the next piece of a snapshot: the server reads Parquet between them.
READ_TIMEOUT = 120.0
_LENGTH = struct.Struct(">i")


class SnapshotDecoder:
    """Bytes of the stream in, rows out, as much as has arrived."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.timestamp: str | None = None  # the header's, once read
        self._table = ""
        self._columns: list[tuple[str, int]] = []

    def feed(self, data: bytes) -> list[SnapshotRow]:
        buffer = self._buffer
        buffer += data
        rows = []
        offset = 0
        while len(buffer) - offset >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(buffer, offset)
            end = offset + _LENGTH.size + length
            if end > len(buffer):
                break
            message = bytes(buffer[offset + _LENGTH.size : end])
            offset = end
            if self.timestamp is None:
                self.timestamp = pb.SnapshotHeaderPb.FromString(message).timestamp
                continue
            stream = pb.StreamMessagePb.FromString(message)
            if stream.WhichOneof("message") == "table":
                self._table = stream.table.name
                self._columns = [(column.name, column.type) for column in stream.table.columns]
                continue
            values = stream.row.values
            if not self._table or len(values) != len(self._columns):
                raise ChangeFeedError(
                    f"the snapshot stream sent a row of {len(values)} values where table"
                    f" {self._table or '(none yet)'} has {len(self._columns)} columns"
                )
            rows.append(
                SnapshotRow(
                    self._table,
                    {
                        name: Column(from_protobuf(value), oid)
                        for (name, oid), value in zip(self._columns, values, strict=True)
                    },
                )
            )
        del buffer[:offset]
        return rows

    def finish(self) -> None:
        if self._buffer or self.timestamp is None:
            raise ChangeFeedError("the snapshot stream ended part way through a message")


def take(run: FeedRun, reason: str) -> Generator[Effect, Any, str | None]:
    """Hand out the newest snapshot of the run's selectors (a :class:`SnapshotStart`, its
    rows, a :class:`SnapshotEnd`); its sequence, or ``None`` once stopping.

    A snapshot is only taken when the change log still holds the changes after it: one that
    is not (older than retention, or than a TRUNCATE of its tables) is waited out, as is no
    snapshot at all, until a newer one is published or ``snapshot_wait`` has passed. One
    that breaks part way is taken again from its start: a new :class:`SnapshotStart`.
    """
    settings, state = run.settings, run.state
    deadline = time.monotonic() + settings.snapshot_wait
    delays = settings.backoff.delays()
    timeout = httpx.Timeout(settings.timeout, read=READ_TIMEOUT)
    headers = {"Accept": PROTOBUF, "Accept-Encoding": "gzip"}
    while not state.stopping:
        answer = yield from exchange(
            lambda base: Open(
                "GET", base + "/snapshots", run.selector_params(), headers, None, timeout
            ),
            run.endpoints,
            settings.backoff,
            run.stopping,
        )
        if answer is None:
            return None
        if answer.status == 200:
            sequence = answer.headers.get(SEQUENCE_HEADER, "")
            snapshot_id = answer.headers.get(ID_HEADER, "")
            if not sequence:
                yield Close()
                raise ChangeFeedError(
                    f"GET /snapshots answered without {SEQUENCE_HEADER}: the changes after"
                    " the snapshot cannot be found"
                )
            held = yield from _changes_held_after(run, sequence)
            if held is None:
                yield Close()
                return None
            if held:
                start = SnapshotStart(snapshot_id, sequence, "", reason)
                rows = yield from _hand_out(run, start)
                if rows is not None:
                    return sequence
                problem = f"snapshot {snapshot_id} broke off part way"
            else:
                yield Close()
                problem = (
                    f"snapshot {snapshot_id} is exact at {sequence}, and the change log no"
                    " longer holds the changes after it"
                )
        elif answer.status == 404:
            problem = f"no snapshot to start from ({Refusal.of(answer.status, answer.body)})"
        else:
            raise ChangeFeedError(f"GET /snapshots: {Refusal.of(answer.status, answer.body)}")
        if time.monotonic() >= deadline:
            raise SnapshotUnavailable(
                f"{problem}; waited {settings.snapshot_wait:g} s for a newer one: run the"
                " replay (`changebroker replay`, or `up --replay-every`) more often than the"
                " changeserver's --max-age"
            )
        delay = next(delays)
        log.warning("%s; asking again in %.1f s", problem, delay)
        yield Sleep(delay)
    return None


def _changes_held_after(run: FeedRun, sequence: str) -> Generator[Effect, Any, bool | None]:
    """Whether ``/changes?since=sequence`` still answers (not ``SNAPSHOT_TOO_OLD``)."""
    params = (*run.selector_params(), ("since", sequence), ("limit", "0"))
    answer = yield from exchange(
        lambda base: Call("GET", base + "/changes", params, run.accept()),
        run.endpoints,
        run.settings.backoff,
        run.stopping,
    )
    if answer is None:
        return None
    if answer.status == 200:
        return True
    refusal = Refusal.of(answer.status, answer.body)
    if refusal.code == "SNAPSHOT_TOO_OLD":
        return False
    raise ChangeFeedError(f"GET /changes: {refusal}")


def _hand_out(run: FeedRun, start: SnapshotStart) -> Generator[Effect, Any, int | None]:
    """Read the open snapshot to its end, handing out its rows; how many, or ``None`` when
    it broke off (or the run stops) before its end."""
    decoder = SnapshotDecoder()
    count = 0
    while not run.state.stopping:
        piece = yield Read()
        if isinstance(piece, Failure):
            log.warning("the snapshot stream broke off after %d rows: %s", count, piece)
            break
        if not piece:
            yield Close()
            decoder.finish()
            if count == 0:  # a snapshot of no rows still replaces what the consumer holds
                yield Emit(_dated(start, decoder))
            run.state.pending = Position(start.sequence, run.settings.selectors)
            yield Emit(SnapshotEnd(start.snapshot_id, start.sequence, count))
            return count
        rows = decoder.feed(piece)
        for row in rows:
            if count == 0:
                yield Emit(_dated(start, decoder))
            yield Emit(row)
            count += 1
    yield Close()
    return None


def _dated(start: SnapshotStart, decoder: SnapshotDecoder) -> SnapshotStart:
    return SnapshotStart(start.snapshot_id, start.sequence, decoder.timestamp or "", start.reason)
