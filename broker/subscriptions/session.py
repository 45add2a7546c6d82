"""One stream of a subscription in this process: its Kafka consumer, its partitions, its batches.

A partition moves between streams (rebalance, direct request, a stream ending)
only once what its owner sent is committed (``release_offset``) or at
``release_deadline`` (the owner's commit_timeout), whichever comes first: the
owner stops sending it at once, a commit reaching ``release_offset`` hands it
over, and the next owner takes it itself when the deadline passes. A stream with
events uncommitted for commit_timeout is closed and can no longer commit; a
stream that ends otherwise can still commit for commit_timeout after its last
batch, as the manual says.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from changebroker import http, logs
from changebroker.broker.avro import envelope
from changebroker.broker.event_types.store import Store
from changebroker.broker.streams.cursors import offset_text
from changebroker.broker.streams.event_stream import (
    MESSAGES_PER_POLL,
    STREAM_CONSUMER_SETTINGS,
    Batcher,
    LimitError,
    PartitionBatch,
    Streamed,
    StreamLimits,
    parse_limits,
)
from changebroker.broker.streams.timeline_reading import (
    Assignment,
    Consumers,
    GoneTimeline,
    Readings,
)
from changebroker.broker.streams.transcode import Transcoder, Unrepresentable
from changebroker.broker.subscriptions.dead_letters import QUEUE_EVENT_TYPE, dead_letter
from changebroker.broker.subscriptions.dead_letters import policy_of as dead_letters_policy
from changebroker.broker.subscriptions.read_ahead import READ_AHEAD_EVENTS, ReadAhead
from changebroker.broker.subscriptions.store import (
    PartitionKey,
    Subscription,
    locked,
    notify_sql,
    rebalance_partitions,
)
from changebroker.broker.timelines.model import Timelines
from changebroker.broker.timelines.store import TimelineStore
from changebroker.numerals import whole_number

log = logging.getLogger(__name__)

DEFAULT_MAX_UNCOMMITTED = 10
# Publishes events the broker writes itself to an event type (the dead-letter queue's).
DeadLetterSink = Callable[[str, list[dict[str, Any]]], Awaitable[None]]
# Streams notice notifications between polls: this bounds how late a rebalance is seen.
SUBSCRIPTION_POLL_SECONDS = 0.1
_DRAIN_CHECK_SECONDS = 1.0  # longest wait for a commit before looking at ``http.draining``


@dataclass(frozen=True)
class StreamParams:
    limits: StreamLimits
    max_uncommitted: int
    commit_timeout: float
    # Partitions requested directly, in the order asked, each once.
    requested: tuple[PartitionKey, ...]


def parse_params(values: Mapping[str, Any], max_commit_timeout: float) -> StreamParams:
    """Query parameters (GET) or the body (POST): Nakadi's defaults and its rules (422).

    ``commit_timeout`` may be up to ``max_commit_timeout``, which is also what 0 or none means.
    """
    texts = {k: str(v) for k, v in values.items() if v is not None and k != "partitions"}
    limits = parse_limits(texts, subscription=True)
    raw_max = texts.get("max_uncommitted_events", str(DEFAULT_MAX_UNCOMMITTED))
    if not whole_number(raw_max) or int(raw_max) < 1:
        raise LimitError("max_uncommitted_events must be a whole number of at least 1")
    try:
        commit_timeout = float(texts.get("commit_timeout", "0"))
    except ValueError:
        raise LimitError("commit_timeout must be a number of seconds") from None
    if commit_timeout > max_commit_timeout:
        raise LimitError(f"commit_timeout can not be more than {max_commit_timeout:g}")
    if not commit_timeout >= 0:
        raise LimitError("commit_timeout can not be less than 0")
    requested: list[PartitionKey] = []
    partitions = values.get("partitions") or []
    if not isinstance(partitions, list):
        raise LimitError("partitions must be an array of {event_type, partition}")
    for item in partitions:
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("event_type"), str)
            or not whole_number(str(item.get("partition", "")))
        ):
            raise LimitError(f"each partition needs event_type and partition, got {item!r}")
        requested.append((item["event_type"], int(item["partition"])))
    if len(set(requested)) < len(requested):
        raise LimitError("Duplicated partition specified")
    return StreamParams(
        limits, int(raw_max), commit_timeout or max_commit_timeout, tuple(requested)
    )


@dataclass
class _Batch(PartitionBatch):
    """A subscription partition's batches: cursors carry the event type and a cursor token."""

    event_type_json: bytes = b""

    def cursor_end(self) -> bytes:
        return (
            b'","event_type":"'
            + self.event_type_json
            + b'","cursor_token":"'
            + str(uuid.uuid4()).encode()
            + b'"}'
        )


@dataclass
class _AvroBatch(_Batch):
    """A partition's batches for an Avro reader: Nakadi's ``ConsumptionBatch`` records."""

    partition_text: str = ""
    event_type: str = ""

    def _record(self, offset: int, info: str | None, events: list[bytes]) -> bytes:
        cursor = {
            "partition": self.partition_text,
            "offset": self.offset_text(offset),
            "event_type": self.event_type,
            "cursor_token": str(uuid.uuid4()),
        }
        return envelope.consumption_batch(cursor, info, events)

    def line(self, info: str | None = None) -> bytes:
        if not self.pending:
            self.keep_alives += 1
            return self._record(self.last_offset, info, [])
        self.keep_alives = 0
        self.sent = self.last_offset
        events, self.pending, self.pending_bytes = self.pending, [], 0
        return self._record(self.last_offset, info, events)

    def info_line(self, info: str) -> bytes:
        return self._record(self.sent, info, [])


class SessionEnded(Exception):
    """The session was closed by someone else (a cursor reset, the subscription deleted);
    ``debug``: what the stream's last batch says, if anything."""

    def __init__(self, debug: str | None = None) -> None:
        super().__init__(debug)
        self.debug = debug


class Session:
    """One stream of a subscription in this process: its Kafka consumer and its partitions.

    ``local_sessions`` is this process's set of open stream ids (the ones it keeps alive);
    the session leaves it when it closes.
    """

    def __init__(
        self,
        store: Store,
        timelines: TimelineStore,
        local_sessions: set[str],
        subscription: Subscription,
        stream_id: str,
        params: StreamParams,
        topics: Mapping[str, Timelines],
        changed: asyncio.Event,
        *,
        memory_limit: int,
        blocked: Callable[[], Awaitable[bool]],
        transcode: Transcoder,
        dead_letters: DeadLetterSink,
        streamed: Streamed | None = None,
    ) -> None:
        """``memory_limit``: the bytes of events held for batches not yet due; ``blocked``:
        asked on every turn of the stream, which ends once it says so; ``transcode``: what
        the reader gets of each event (JSON or Avro, :mod:`changebroker.broker.streams.transcode`);
        ``dead_letters``: publishes to the dead-letter queue (its event type, its events);
        ``streamed``: where what it sends is counted, per event type."""
        self._store = store
        self._timeline_store = timelines
        self._local_sessions = local_sessions
        self.subscription_id = subscription.id
        self.stream_id = stream_id
        self._params = params
        self._topics = dict(topics)
        self._changed = changed
        self._blocked = blocked
        self._transcode = transcode
        self._dead_letters = dead_letters
        self._policy = dead_letters_policy(subscription.annotations)
        # Partitions looking for a poison pill: (failed sends, last offset looked through).
        self._searching: dict[PartitionKey, tuple[int, int]] = {}
        # Nakadi ends a subscription stream once stream_limit events are committed, not sent:
        # the batcher does not count them, the session does (``_allowance``,
        # ``_committed_events``).
        self._batcher = Batcher(
            dataclasses.replace(params.limits, stream_limit=0),
            memory_limit,
            overflow_info="Stream parameters are causing overflow",
            first_info="Stream started",
            streamed=streamed,
            subscription_id=subscription.id,
        )
        self._ahead = ReadAhead(memory_limit)
        self._streaming: dict[PartitionKey, _Batch] = {}
        # Partitions given up but still held: the offset last sent, until it is committed.
        self._releasing: dict[PartitionKey, int] = {}
        self._committed: dict[PartitionKey, int] = {}
        self._takeover_at: float | None = None
        self._uncommitted_since: float | None = None
        self._last_sent_at = time.monotonic()
        self._commit_timed_out = False
        # Events committed on this stream's partitions while it ran: what stream_limit counts.
        self._committed_events = 0
        # Why the stream must end (an event its reader's format cannot carry), once known.
        self._ending: str | None = None
        self._closed = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="subscription")
        self._consumers: Consumers | None = None
        # Which timeline each partition is read in (broker/streams/timeline_reading.py).
        self._readings = Readings()

    # Kafka, on the session's own thread.
    def _open(self) -> None:
        self._consumers = Consumers(STREAM_CONSUMER_SETTINGS)

    def _reassign(self, add: list[Assignment], remove: list[Assignment]) -> None:
        assert self._consumers is not None
        self._consumers.change(add, remove)

    def _poll(self, timeout: float, most: int) -> list[Any]:
        assert self._consumers is not None
        return self._consumers.poll(timeout, most)

    def _close_consumer(self) -> None:
        if self._consumers is not None:
            self._consumers.close()
            self._consumers = None

    async def _kafka(self, function: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    def _sent(self, key: PartitionKey) -> int:
        batch = self._streaming.get(key)
        if batch is not None:
            return batch.sent
        return self._releasing.get(key, self._committed.get(key, -1))

    def _uncommitted(self) -> int:
        """Events sent and not yet committed (what max_uncommitted_events limits)."""
        total = 0
        for key, batch in self._streaming.items():
            total += max(batch.sent - self._committed[key], 0)
        for key, sent in self._releasing.items():
            total += max(sent - self._committed[key], 0)
        return total

    async def _refresh(self, out: list[bytes]) -> None:
        """Follow Postgres: partitions gained, given up, moving to us; commits made."""
        async with self._store.pool.connection() as conn:
            # The session and our partitions in one round trip: every commit causes one.
            cur = await conn.execute(
                "SELECT s.open, s.resetting, p.event_type, p.partition, p.committed,"
                " p.owner::text, p.next_owner::text, p.release_offset,"
                " greatest(extract(epoch FROM p.release_deadline - now()), 0),"
                " p.failed_commits, p.last_dead_letter_offset"
                " FROM (SELECT closed_at IS NULL AS open,"
                " (SELECT coalesce(reset_until > now(), false) FROM broker_subscriptions"
                " WHERE id = %s) AS resetting"
                " FROM broker_subscription_sessions WHERE stream_id = %s) s"
                " LEFT JOIN broker_subscription_partitions p ON p.subscription_id = %s"
                " AND (p.owner = %s OR p.next_owner = %s)",
                (
                    self.subscription_id,
                    self.stream_id,
                    self.subscription_id,
                    self.stream_id,
                    self.stream_id,
                ),
            )
            found = await cur.fetchall()
        if not found:
            raise SessionEnded()
        if not found[0][0]:
            raise SessionEnded("Resetting subscription cursors" if found[0][1] else None)
        rows = [row[2:] for row in found if row[2] is not None]
        me = self.stream_id
        owned: set[PartitionKey] = set()
        add: list[Assignment] = []
        remove: list[Assignment] = []
        # A partition added since the stream started (repartitioning) is read with the
        # timelines that have it.
        if any(partition >= self._topics[et].partitions for et, partition, *_ in rows):
            await self._follow_timelines()
        hand_over: list[PartitionKey] = []
        mark: list[tuple[PartitionKey, int]] = []
        waits: list[float] = []
        advanced = False
        for row in rows:
            event_type, partition, committed, owner, next_owner, release_offset, wait = row[:7]
            key = (event_type, partition)
            if owner != me:
                waits.append(float(wait or 0))
                continue
            owned.add(key)
            failed, last_dead_letter = row[7:]
            if self._policy is not None and last_dead_letter is not None:
                self._searching[key] = (failed, last_dead_letter)
            else:
                self._searching.pop(key, None)
            progress = committed - self._committed.get(key, committed)
            advanced |= progress > 0
            self._committed_events += max(progress, 0)
            self._committed[key] = committed
            if next_owner is None and key not in self._streaming:
                self._releasing.pop(key, None)
                add.append(self._start(key, committed))
            elif next_owner is not None:
                if key in self._streaming:
                    remove.append(self._stop(key, out))
                sent = self._releasing.setdefault(key, committed)
                if sent <= committed:
                    hand_over.append(key)
                elif release_offset is None:
                    mark.append((key, sent))
        for key, batch in self._streaming.items():
            batch.most = 1 if key in self._searching else 0
        for key in [*self._streaming, *self._releasing]:
            if key not in owned:
                if key in self._streaming:
                    remove.append(self._stop(key, out))
                self._releasing.pop(key, None)
        if add or remove:
            await self._kafka(self._reassign, add, remove)
        if hand_over or mark:
            await self._hand_over(hand_over, mark)
        self._takeover_at = time.monotonic() + min(waits) if waits else None
        if advanced:
            self._uncommitted_since = time.monotonic()

    def _new_batch(self, key: PartitionKey, sent: int) -> _Batch:
        """The batches of a partition whose last event sent is ``sent``."""
        reading = self._readings.by_key.get(key)
        kind = _AvroBatch if self._transcode.binary else _Batch
        batch = kind(
            b'{"cursor":{"partition":"' + str(key[1]).encode() + b'","offset":"',
            sent,
            functools.partial(offset_text, self._topics[key[0]], partition=key[1]),
            time.monotonic() + self._params.limits.batch_flush_timeout,
            base=0 if reading is None else reading.base,
            event_type_json=json.dumps(key[0])[1:-1].encode(),
            label=key[0],
        )
        if isinstance(batch, _AvroBatch):
            batch.partition_text, batch.event_type = str(key[1]), key[0]
        return batch

    def _start(self, key: PartitionKey, committed: int) -> Assignment:
        """Start sending a partition after ``committed``; what to assign."""
        try:
            assignment = self._readings.start(key, self._topics[key[0]], committed)
        except GoneTimeline as gone:
            raise SessionEnded(str(gone)) from None
        topic_key = self._readings.topic_key(key)
        batch = self._new_batch(key, committed)
        self._streaming[key] = batch
        self._batcher.partitions[topic_key] = batch
        self._ahead.drop(topic_key)
        return assignment

    def _stop(self, key: PartitionKey, out: list[bytes]) -> Assignment:
        """Stop sending a partition; what waits for its batch is sent first, to be committed.
        What to unassign."""
        batch = self._streaming.pop(key)
        topic_key = self._readings.topic_key(key)
        del self._batcher.partitions[topic_key]
        self._ahead.drop(topic_key)
        if batch.pending:
            out.append(self._batcher.emit(batch))
        self._releasing[key] = batch.sent
        gone = self._readings.stop(key)
        assert gone is not None
        return gone

    async def _follow_timelines(self) -> None:
        """The event types' timelines as they are now: a partition read in a timeline that
        closed since learns where it ends."""
        for name, kept in list(self._topics.items()):
            current = await self._timeline_store.of(name)
            if current is not None and current is not kept:
                self._topics[name] = current
                self._readings.follow(current)
                self._transcode.follow(current)

    async def _move_on(self) -> None:
        """Partitions that reached the end of a closed timeline go on in the next one, after
        whatever the stream read of it (its events are all before the end)."""
        await self._follow_timelines()
        if not self._readings.closing():
            return
        positions = {key: batch.last_offset for key, batch in self._streaming.items()}
        for key in self._readings.ended(positions):
            old_key = self._readings.topic_key(key)
            if self._ahead.holds(old_key):
                continue  # read ahead, not yet batched: moved on once it is
            try:
                gone, added = self._readings.move_on(key, positions[key])
            except GoneTimeline as gone_timeline:
                raise SessionEnded(str(gone_timeline)) from None
            await self._kafka(self._reassign, [added], [gone])
            batch = self._streaming[key]
            batch.base = self._readings.by_key[key].base
            batch.offset_text = functools.partial(
                offset_text, self._topics[key[0]], partition=key[1]
            )
            self._batcher.rekey(old_key, self._readings.topic_key(key))

    async def _hand_over(
        self, keys: list[PartitionKey], marks: list[tuple[PartitionKey, int]]
    ) -> None:
        async with locked(self._store, self.subscription_id) as (conn, row):
            if row is None:
                raise SessionEnded()
            for event_type, partition in keys:
                await conn.execute(
                    "UPDATE broker_subscription_partitions SET owner = next_owner,"
                    " next_owner = NULL, release_offset = NULL, release_deadline = NULL"
                    " WHERE subscription_id = %s AND event_type = %s AND partition = %s"
                    " AND owner = %s AND next_owner IS NOT NULL",
                    (self.subscription_id, event_type, partition, self.stream_id),
                )
            for (event_type, partition), sent in marks:
                await conn.execute(
                    "UPDATE broker_subscription_partitions SET release_offset = %s"
                    " WHERE subscription_id = %s AND event_type = %s AND partition = %s"
                    " AND owner = %s",
                    (sent, self.subscription_id, event_type, partition, self.stream_id),
                )
            await conn.execute(*notify_sql(self.subscription_id))
        for key in keys:
            self._releasing.pop(key, None)

    async def _take_over(self) -> None:
        """The owner's deadline passed: the partitions moving to this stream are ours now."""
        self._takeover_at = None
        async with locked(self._store, self.subscription_id) as (conn, row):
            if row is None:
                raise SessionEnded()
            await conn.execute(
                "UPDATE broker_subscription_partitions SET owner = next_owner, next_owner = NULL,"
                " release_offset = NULL, release_deadline = NULL"
                " WHERE subscription_id = %s AND next_owner = %s AND release_deadline <= now()",
                (self.subscription_id, self.stream_id),
            )
            await conn.execute(*notify_sql(self.subscription_id))

    async def lines(self) -> AsyncIterator[bytes]:
        """The stream's batches; ends on a limit, a timeout, commit timeout or a reset.

        The session is closed before the response ends, so a client that saw the end
        finds the session closed (a commit after a commit timeout is refused at once).
        """
        async for chunk in self._batches():
            yield chunk
        await self.close()

    async def _batches(self) -> AsyncIterator[bytes]:
        limits = self._params.limits
        await self._kafka(self._open)
        started = time.monotonic()
        ends_at = started + limits.stream_timeout
        self._changed.set()
        while True:
            out: list[bytes] = []
            sent_before = self._batcher.sent
            try:
                if self._changed.is_set():
                    self._changed.clear()
                    await self._refresh(out)
                if self._takeover_at is not None and time.monotonic() >= self._takeover_at:
                    await self._take_over()
                    continue
                await self._move_on()
            except SessionEnded as ended:
                if ended.debug is not None:
                    out += self._last_words(ended.debug)
                if out:
                    yield b"".join(out)
                return
            if await self._blocked():
                yield b"".join(out + self._last_words("Consumption is blocked"))
                return
            stream_limit = self._params.limits.stream_limit
            if stream_limit and self._committed_events >= stream_limit:
                reached = f"Stream limit in events reached: {self._committed_events}"
                yield b"".join(out + self._last_words(reached))
                return
            if self._searching:
                await self._skip_poison_pills()
            if self._ending is not None:
                log.warning(
                    "subscription stream closed: an event its format cannot carry",
                    extra=logs.fields(stream_id=self.stream_id, reason=self._ending),
                )
                yield b"".join(out + self._last_words(self._ending))
                return
            now = time.monotonic()
            uncommitted = self._uncommitted()
            if uncommitted == 0:
                self._uncommitted_since = None
            elif self._uncommitted_since is None:
                self._uncommitted_since = now
            elif now - self._uncommitted_since >= self._params.commit_timeout:
                self._commit_timed_out = True
                log.info(
                    "subscription stream closed: commit timeout",
                    extra=logs.fields(stream_id=self.stream_id),
                )
                yield b"".join(out + self._last_words("Commit timeout reached"))
                return
            # Nakadi sends at most max_uncommitted_events - uncommitted, in batches of
            # min(batch_limit, that). The batcher is given no more than that less what already
            # waits for its batch, so whatever waits can always be sent; the rest of what was
            # read waits ahead.
            allowance = self._allowance(uncommitted)
            waiting = sum(len(batch.pending) for batch in self._streaming.values())
            wake = min(
                self._batcher.next_flush(ends_at),
                self._takeover_at or math.inf,
                (self._uncommitted_since or math.inf) + self._params.commit_timeout,
            )
            messages = []
            sendable = allowance > waiting and bool(self._streaming)
            most = self._ahead_most()
            if self._streaming and (self._ahead.count or not sendable):
                await self._read_ahead(0.0, most)
            if sendable:
                messages = self._from_ahead(allowance, most)
                if not messages and self._ahead.room(most):
                    # Nothing to give the batcher yet: wait for events.
                    wait = min(max(wake - now, 0.0), SUBSCRIPTION_POLL_SECONDS)
                    await self._read_ahead(wait, most)
                    messages = self._from_ahead(allowance, most)
            if not sendable or not (messages or self._ahead.room(most)):
                with contextlib.suppress(TimeoutError):
                    # Bounded, so a stop request (``http.draining``) is noticed soon.
                    limit = min(wake - now, _DRAIN_CHECK_SECONDS)
                    await asyncio.wait_for(self._changed.wait(), max(limit, 0.0))
            out += self._batcher.take(messages, allowance)[0]
            now = time.monotonic()
            timed_out = now >= ends_at
            if timed_out:
                # Nakadi sends everything it holds (that it may send) when the stream times
                # out: what was read ahead too, not only what waits for its batch.
                allowance = self._allowance(self._uncommitted())
                rest = self._from_ahead(allowance, most, ending=True)
                out += self._batcher.take(rest, allowance)[0]
            # Asked to stop: what is batched goes out, then the stream ends whole.
            over = timed_out or http.draining.is_set()
            # What waits fills the allowance, spread over partitions none of which has a full
            # batch: the batcher gets nothing more before a commit, so it goes now, not at the
            # flush timeout.
            waiting = sum(len(batch.pending) for batch in self._streaming.values())
            stuck = 0 < waiting >= self._allowance(self._uncommitted())
            self._ahead.note_overdue(self._batcher.partitions, now)
            out += self._batcher.due(now, over or stuck)
            if timed_out:
                out += self._last_words("Stream timeout reached")
            if out:
                if self._batcher.sent > sent_before:
                    self._last_sent_at = now
                yield b"".join(out)
            if over or self._batcher.keep_alive_limit_reached():
                return

    def _last_words(self, debug: str) -> list[bytes]:
        """The stream's last batch, saying why it ends: no events, at the cursor last sent of
        its first partition (nothing when it has none), as Nakadi ends a subscription stream."""
        keys = sorted(self._streaming) or sorted(self._releasing)
        if not keys:
            return []
        key = keys[0]
        batch = (
            self._streaming[key]
            if key in self._streaming
            else self._new_batch(key, self._releasing[key])
        )
        return [self._batcher.info_line(batch, debug)]

    def _allowance(self, uncommitted: int) -> int:
        """Events the stream may still send: max_uncommitted_events less what is uncommitted,
        and no more than stream_limit in all, as Nakadi counts them."""
        allowance = self._params.max_uncommitted - uncommitted
        limit = self._params.limits.stream_limit
        return min(allowance, limit - self._batcher.sent) if limit else allowance

    def _ahead_most(self) -> int:
        """Events read ahead at most: the allowance and a batch for every partition, or more
        while they fit in the read-ahead's bytes."""
        limits = self._params.limits
        most = self._params.max_uncommitted + limits.batch_limit * len(self._streaming)
        return max(most, READ_AHEAD_EVENTS)

    async def _read_ahead(self, wait: float, most: int) -> None:
        """Reads what the read-ahead has room for (``most`` events held at most); waits up to
        ``wait`` for the first event."""
        if self._ending is None and (room := self._ahead.room(most)):
            polled = await self._kafka(self._poll, wait, min(room, MESSAGES_PER_POLL))
            try:
                await self._transcode(polled)
            except Unrepresentable as exc:
                # Nothing of this poll is sent: the next stream reads it again.
                self._ending = str(exc)
                return
            self._ahead.add(polled, self._batcher.partitions)

    def _from_ahead(self, allowance: int, most: int, *, ending: bool = False) -> list[Any]:
        return self._ahead.take(
            self._batcher.partitions,
            allowance=allowance,
            batch_limit=self._params.limits.batch_limit,
            now=time.monotonic(),
            full=not self._ahead.room(most),
            ending=ending,
            caps=self._one_at_a_time() if self._searching else None,
        )

    def _one_at_a_time(self) -> dict[tuple[str, int], int]:
        """Partitions looking for a poison pill get one event, once the one before is
        committed; none while the next one is to be skipped."""
        assert self._policy is not None
        most = self._policy.max_event_send_count
        return {
            self._readings.topic_key(key): int(
                batch.sent <= self._committed[key] and self._searching[key][0] < most
            )
            for key, batch in self._streaming.items()
            if key in self._searching
        }

    async def _skip_poison_pills(self) -> None:
        """Each partition whose single event failed as often as the policy allows skips it:
        to the dead-letter queue if the policy says so, then committed for the consumer."""
        assert self._policy is not None
        for key, (failed, last) in list(self._searching.items()):
            batch = self._streaming.get(key)
            if failed < self._policy.max_event_send_count or batch is None:
                continue
            topic_key = self._readings.topic_key(key)
            message = self._ahead.pop_first(topic_key)
            if message is None:
                await self._read_ahead(SUBSCRIPTION_POLL_SECONDS, self._ahead_most())
                message = self._ahead.pop_first(topic_key)
            if message is None:
                continue  # not read yet: the next turn
            # The position of the event (broker/timelines/model.py), as committed offsets are.
            offset: int = self._readings.by_key[key].base + message.offset()  # type: ignore[operator]
            if self._policy.to_queue:
                letter = dead_letter(
                    self.subscription_id,
                    key[0],
                    key[1],
                    batch.offset_text(offset),
                    failed,
                    await self._transcode.json_of(message),
                )
                try:
                    await self._dead_letters(QUEUE_EVENT_TYPE, [letter])
                except Exception as exc:
                    # Nothing skipped: the next stream tries again.
                    self._ending = f"Failed to store an event to the dead letter queue: {exc}"
                    return
            log.warning(
                "subscription event skipped: its commit failed too often",
                extra=logs.fields(
                    subscription_id=self.subscription_id,
                    event_type=key[0],
                    partition=key[1],
                    offset=offset,
                    failed_sends=failed,
                    policy=self._policy.policy,
                ),
            )
            await self._commit_skipped(key, offset)
            batch.last_offset = batch.sent = offset
            self._searching[key] = (0, last)

    async def _commit_skipped(self, key: PartitionKey, offset: int) -> None:
        """The skipped event committed, as Nakadi's autocommit does; the end of the batch
        looked through reached, the search is over."""
        async with locked(self._store, self.subscription_id) as (conn, row):
            if row is None:
                raise SessionEnded()
            await conn.execute(
                "UPDATE broker_subscription_partitions SET committed = %s, failed_commits = 0,"
                " last_dead_letter_offset = CASE WHEN last_dead_letter_offset <= %s THEN NULL"
                " ELSE last_dead_letter_offset END"
                " WHERE subscription_id = %s AND event_type = %s AND partition = %s"
                " AND owner = %s AND committed < %s",
                (offset, offset, self.subscription_id, *key, self.stream_id, offset),
            )
            await conn.execute(*notify_sql(self.subscription_id))
        self._changed.set()

    async def _count_failed_send(self, conn: Any, key: PartitionKey) -> None:
        """The stream ends with events of the partition uncommitted: one failed send more; at
        the policy's count, the partition looks for the poison pill through the batch that
        failed (``batch_limit`` events after its committed offset), counting anew."""
        assert self._policy is not None
        await conn.execute(
            "UPDATE broker_subscription_partitions SET"
            " failed_commits = CASE WHEN last_dead_letter_offset IS NULL"
            " AND failed_commits + 1 >= %(most)s THEN 0 ELSE failed_commits + 1 END,"
            " last_dead_letter_offset = CASE WHEN last_dead_letter_offset IS NULL"
            " AND failed_commits + 1 >= %(most)s THEN committed + %(batch)s"
            " ELSE last_dead_letter_offset END"
            " WHERE subscription_id = %(subscription)s AND event_type = %(event_type)s"
            " AND partition = %(partition)s",
            {
                "most": self._policy.max_event_send_count,
                "batch": self._params.limits.batch_limit,
                "subscription": self.subscription_id,
                "event_type": key[0],
                "partition": key[1],
            },
        )

    async def close(self) -> None:
        """The stream is over: what it sent stays committable for commit_timeout, the rest moves."""
        if self._closed:
            return
        self._closed = True
        self._local_sessions.discard(self.stream_id)
        await self._kafka(self._close_consumer)
        self._executor.shutdown(wait=False)
        remaining = (
            0.0
            if self._commit_timed_out
            else max(self._params.commit_timeout - (time.monotonic() - self._last_sent_at), 0.0)
        )
        async with locked(self._store, self.subscription_id) as (conn, row):
            if row is None:
                return
            await conn.execute(
                "UPDATE broker_subscription_sessions SET finished = true,"
                " closed_at = coalesce(closed_at, now()),"
                " commit_deadline = coalesce(commit_deadline, now() + make_interval(secs => %s))"
                " WHERE stream_id = %s",
                (remaining, self.stream_id),
            )
            cur = await conn.execute(
                "SELECT event_type, partition, committed FROM broker_subscription_partitions"
                " WHERE subscription_id = %s AND owner = %s",
                (self.subscription_id, self.stream_id),
            )
            for event_type, partition, committed in await cur.fetchall():
                sent = self._sent((event_type, partition))
                if sent > committed and self._policy is not None:
                    await self._count_failed_send(conn, (event_type, partition))
                if sent > committed and remaining > 0:
                    await conn.execute(
                        "UPDATE broker_subscription_partitions SET release_offset = %s,"
                        " release_deadline = now() + make_interval(secs => %s)"
                        " WHERE subscription_id = %s AND event_type = %s AND partition = %s",
                        (sent, remaining, self.subscription_id, event_type, partition),
                    )
                else:
                    await conn.execute(
                        "UPDATE broker_subscription_partitions SET owner = next_owner,"
                        " next_owner = NULL, release_offset = NULL, release_deadline = NULL"
                        " WHERE subscription_id = %s AND event_type = %s AND partition = %s",
                        (self.subscription_id, event_type, partition),
                    )
            await rebalance_partitions(conn, self.subscription_id)
