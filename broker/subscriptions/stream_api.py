"""Subscription streams, commits, cursors, resets and stats, coordinated across broker processes.

Postgres holds the truth (``sql/broker/002_subscriptions.sql``): sessions (one per
X-Nakadi-StreamId), the owner of every partition and its committed offset. Every
change runs in a transaction that first locks the subscription's row, so changes
to one subscription are serialised whichever process makes them, and ends with a
NOTIFY that wakes the subscription's streams in every process
(:mod:`broker.subscriptions.coordination`).

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
import json
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import anyio
import psycopg
from confluent_kafka import Consumer, TopicPartition
from psycopg.rows import dict_row
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from broker import bodies
from broker.event_types.store import Store, StoreResolver
from broker.event_types.topics import EventTypeTopic
from broker.problems import problem
from broker.streams.api import STREAM_MEDIA_TYPE, _gzipped, _wants_gzip
from broker.streams.cursors import OffsetFormatError, format_offset, parse_offset
from broker.streams.event_stream import (
    MESSAGES_PER_POLL,
    STREAM_CONSUMER_SETTINGS,
    Batcher,
    LimitError,
    PartitionBatch,
    StreamLimits,
    parse_limits,
    poll,
)
from broker.streams.watermarks import Watermarks, consumer_config
from broker.subscriptions import rebalance
from broker.subscriptions.coordination import ALIVE_SECONDS, Coordinator
from broker.subscriptions.store import (
    PartitionKey,
    Subscription,
    SubscriptionApi,
    SubscriptionError,
    Subscriptions,
    not_found,
    notify_sql,
    valid_id,
    whole_number,
)
from changebroker import logs

log = logging.getLogger(__name__)

STREAM_ID_HEADER = "X-Nakadi-StreamId"
DEFAULT_MAX_UNCOMMITTED = 10
MAX_COMMIT_TIMEOUT = 60.0
# Streams notice notifications between polls: this bounds how late a rebalance is seen.
SUBSCRIPTION_POLL_SECONDS = 0.1
# How long a cursor reset waits for the streams it closed to end.
RESET_WAIT_SECONDS = MAX_COMMIT_TIMEOUT
TIME_LAG_READ_SECONDS = 5.0
# How long ended sessions stay, for whoever looks at them by hand.
SESSION_RETENTION_SECONDS = 3600.0


@dataclass(frozen=True)
class StreamParams:
    limits: StreamLimits
    max_uncommitted: int
    commit_timeout: float
    requested: frozenset[PartitionKey]


def parse_params(values: Mapping[str, Any]) -> StreamParams:
    """Query parameters (GET) or the body (POST): Nakadi's defaults and its rules (422)."""
    texts = {k: str(v) for k, v in values.items() if v is not None and k != "partitions"}
    limits = parse_limits(texts)
    raw_max = texts.get("max_uncommitted_events", str(DEFAULT_MAX_UNCOMMITTED))
    if not whole_number(raw_max) or int(raw_max) < 1:
        raise LimitError("max_uncommitted_events must be a whole number of at least 1")
    try:
        commit_timeout = float(texts.get("commit_timeout", "0"))
    except ValueError:
        raise LimitError("commit_timeout must be a number of seconds") from None
    if not 0 <= commit_timeout <= MAX_COMMIT_TIMEOUT:
        raise LimitError("commit_timeout must be between 0 and 60 seconds")
    requested: set[PartitionKey] = set()
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
        requested.add((item["event_type"], int(item["partition"])))
    # Nakadi: 0 is the maximum, 60 s.
    return StreamParams(
        limits, int(raw_max), commit_timeout or MAX_COMMIT_TIMEOUT, frozenset(requested)
    )


@dataclass
class _Batch(PartitionBatch):
    """A subscription partition's batches: cursors carry the event type and a cursor token."""

    event_type_json: bytes = b""
    sent: int = -1  # the offset of the last event sent

    def cursor_end(self) -> bytes:
        return (
            b'","event_type":"'
            + self.event_type_json
            + b'","cursor_token":"'
            + str(uuid.uuid4()).encode()
            + b'"}'
        )

    def line(self) -> bytes:
        if self.pending:
            self.sent = self.last_offset
        return super().line()


def _with_info(line: bytes, debug: str) -> bytes:
    """The line (one JSON object and its newline) with ``info.debug`` added."""
    return line[:-2] + b',"info":' + json.dumps({"debug": debug}).encode() + b"}\n"


@contextlib.asynccontextmanager
async def _locked(
    store: Store, subscription_id: str
) -> AsyncIterator[tuple[psycopg.AsyncConnection[Any], dict[str, Any] | None]]:
    """A transaction holding the subscription's row lock: every change to it runs in one."""
    async with store.pool.connection() as conn, conn.transaction():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "SELECT id::text, initialised, coalesce(reset_until > now(), false) AS resetting"
                " FROM broker_subscriptions WHERE id = %s FOR UPDATE",
                (subscription_id,),
            )
            row = await cur.fetchone()
        yield conn, row


async def _rebalance(conn: psycopg.AsyncConnection[Any], subscription_id: str) -> None:
    """Re-assign every partition among the live streams; call with the subscription locked."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "SELECT stream_id::text, requested, commit_timeout FROM broker_subscription_sessions"
            " WHERE subscription_id = %s AND closed_at IS NULL AND alive_until > now()"
            " ORDER BY created_at, stream_id",
            (subscription_id,),
        )
        sessions = await cur.fetchall()
        await cur.execute(
            "SELECT event_type, partition, owner::text, next_owner::text,"
            " coalesce(release_deadline > now(), false) AS holding, assignment_type"
            " FROM broker_subscription_partitions WHERE subscription_id = %s",
            (subscription_id,),
        )
        rows = await cur.fetchall()
    slots = [
        rebalance.Slot(s["stream_id"], frozenset((e, int(p)) for e, p in s["requested"]))
        for s in sessions
    ]
    live = {s.stream_id: s for s in slots}
    timeouts = {s["stream_id"]: s["commit_timeout"] for s in sessions}
    current: dict[PartitionKey, str] = {}
    for row in rows:
        key = (row["event_type"], row["partition"])
        for candidate in (row["next_owner"], row["owner"]):
            if candidate in live:
                current[key] = candidate
                break
    target = rebalance.assign([(r["event_type"], r["partition"]) for r in rows], slots, current)
    for row in rows:
        key = (row["event_type"], row["partition"])
        to = target[key]
        kind = "direct" if to is not None and key in live[to].requested else "auto"
        owner, where = row["owner"], (subscription_id, *key)
        if owner in live and (to == owner or to is None):
            if row["next_owner"] is None and row["assignment_type"] == kind:
                continue
            await conn.execute(
                "UPDATE broker_subscription_partitions SET next_owner = NULL,"
                " release_offset = NULL, release_deadline = NULL, assignment_type = %s"
                " WHERE subscription_id = %s AND event_type = %s AND partition = %s",
                (kind, *where),
            )
        elif owner in live:
            await conn.execute(
                "UPDATE broker_subscription_partitions SET next_owner = %s, assignment_type = %s,"
                " release_deadline = coalesce(release_deadline, now() + make_interval(secs => %s))"
                " WHERE subscription_id = %s AND event_type = %s AND partition = %s",
                (to, kind, timeouts[owner], *where),
            )
        elif owner is not None and row["holding"]:
            # An ended stream may still commit what it was sent until its deadline.
            await conn.execute(
                "UPDATE broker_subscription_partitions SET next_owner = %s, assignment_type = %s"
                " WHERE subscription_id = %s AND event_type = %s AND partition = %s",
                (to, kind, *where),
            )
        elif owner != to or row["next_owner"] is not None:
            await conn.execute(
                "UPDATE broker_subscription_partitions SET owner = %s, next_owner = NULL,"
                " release_offset = NULL, release_deadline = NULL, assignment_type = %s"
                " WHERE subscription_id = %s AND event_type = %s AND partition = %s",
                (to, kind, *where),
            )
    await conn.execute(*notify_sql(subscription_id))


class SessionEnded(Exception):
    """The session was closed by someone else (a cursor reset, the subscription deleted)."""


class Session:
    """One stream of a subscription in this process: its Kafka consumer and its partitions."""

    def __init__(
        self,
        streams: SubscriptionStreams,
        subscription: Subscription,
        stream_id: str,
        params: StreamParams,
        topics: Mapping[str, EventTypeTopic],
        changed: asyncio.Event,
    ) -> None:
        self._streams = streams
        self._store = streams.store
        self.subscription_id = subscription.id
        self.stream_id = stream_id
        self._params = params
        self._topics = dict(topics)
        self._changed = changed
        self._batcher = Batcher(params.limits)
        self._streaming: dict[PartitionKey, _Batch] = {}
        # Partitions given up but still held: the offset last sent, until it is committed.
        self._releasing: dict[PartitionKey, int] = {}
        self._committed: dict[PartitionKey, int] = {}
        self._takeover_at: float | None = None
        self._uncommitted_since: float | None = None
        self._last_sent_at = time.monotonic()
        self._commit_timed_out = False
        self._closed = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="subscription")
        self._consumer: Consumer | None = None

    # Kafka, on the session's own thread.
    def _open(self) -> None:
        self._consumer = Consumer(
            consumer_config(self._streams.bootstrap) | STREAM_CONSUMER_SETTINGS
        )

    def _reassign(self, add: list[TopicPartition], remove: list[TopicPartition]) -> None:
        assert self._consumer is not None
        if remove:
            self._consumer.incremental_unassign(remove)
        if add:
            self._consumer.incremental_assign(add)

    def _poll(self, timeout: float, most: int) -> list[Any]:
        assert self._consumer is not None
        return poll(self._consumer, timeout, most)

    def _close_consumer(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _topic_partition(self, key: PartitionKey, offset: int | None = None) -> TopicPartition:
        topic = self._topics[key[0]].topic
        return (
            TopicPartition(topic, key[1])
            if offset is None
            else TopicPartition(topic, key[1], offset)
        )

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
                "SELECT s.open, p.event_type, p.partition, p.committed, p.owner::text,"
                " p.next_owner::text, p.release_offset,"
                " greatest(extract(epoch FROM p.release_deadline - now()), 0)"
                " FROM (SELECT closed_at IS NULL AS open FROM broker_subscription_sessions"
                " WHERE stream_id = %s) s"
                " LEFT JOIN broker_subscription_partitions p ON p.subscription_id = %s"
                " AND (p.owner = %s OR p.next_owner = %s)",
                (self.stream_id, self.subscription_id, self.stream_id, self.stream_id),
            )
            found = await cur.fetchall()
        if not found or not found[0][0]:
            raise SessionEnded()
        rows = [row[1:] for row in found if row[1] is not None]
        me = self.stream_id
        owned: set[PartitionKey] = set()
        add: list[TopicPartition] = []
        remove: list[TopicPartition] = []
        hand_over: list[PartitionKey] = []
        mark: list[tuple[PartitionKey, int]] = []
        waits: list[float] = []
        advanced = False
        for event_type, partition, committed, owner, next_owner, release_offset, wait in rows:
            key = (event_type, partition)
            if owner != me:
                waits.append(float(wait or 0))
                continue
            owned.add(key)
            advanced |= committed > self._committed.get(key, committed)
            self._committed[key] = committed
            if next_owner is None and key not in self._streaming:
                self._releasing.pop(key, None)
                self._start(key, committed)
                add.append(self._topic_partition(key, committed + 1))
            elif next_owner is not None:
                if key in self._streaming:
                    self._stop(key, out)
                    remove.append(self._topic_partition(key))
                sent = self._releasing.setdefault(key, committed)
                if sent <= committed:
                    hand_over.append(key)
                elif release_offset is None:
                    mark.append((key, sent))
        for key in [*self._streaming, *self._releasing]:
            if key not in owned:
                if key in self._streaming:
                    self._stop(key, out)
                    remove.append(self._topic_partition(key))
                self._releasing.pop(key, None)
        if add or remove:
            await self._kafka(self._reassign, add, remove)
        if hand_over or mark:
            await self._hand_over(hand_over, mark)
        self._takeover_at = time.monotonic() + min(waits) if waits else None
        if advanced:
            self._uncommitted_since = time.monotonic()

    def _start(self, key: PartitionKey, committed: int) -> None:
        topic = self._topics[key[0]]
        batch = _Batch(
            b'{"cursor":{"partition":"' + str(key[1]).encode() + b'","offset":"',
            committed,
            topic.timeline,
            time.monotonic() + self._params.limits.batch_flush_timeout,
            event_type_json=json.dumps(key[0])[1:-1].encode(),
            sent=committed,
        )
        self._streaming[key] = batch
        self._batcher.partitions[(topic.topic, key[1])] = batch

    def _stop(self, key: PartitionKey, out: list[bytes]) -> None:
        """Stop sending a partition; what waits for its batch is sent first, to be committed."""
        batch = self._streaming.pop(key)
        del self._batcher.partitions[(self._topics[key[0]].topic, key[1])]
        if batch.pending:
            out.append(batch.line())
        self._releasing[key] = batch.sent

    async def _hand_over(
        self, keys: list[PartitionKey], marks: list[tuple[PartitionKey, int]]
    ) -> None:
        async with _locked(self._store, self.subscription_id) as (conn, row):
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
        async with _locked(self._store, self.subscription_id) as (conn, row):
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
        debug = "Stream started"
        self._changed.set()
        while True:
            out: list[bytes] = []
            try:
                if self._changed.is_set():
                    self._changed.clear()
                    await self._refresh(out)
                if self._takeover_at is not None and time.monotonic() >= self._takeover_at:
                    await self._take_over()
                    continue
            except SessionEnded:
                if out:
                    yield b"".join(out)
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
                return
            # Nakadi sends at most max_uncommitted_events - uncommitted, in batches of
            # min(batch_limit, that). Polls take no more than that less what already waits
            # for its batch, so whatever waits can always be sent.
            allowance = self._params.max_uncommitted - uncommitted
            waiting = sum(len(batch.pending) for batch in self._streaming.values())
            wake = min(
                self._batcher.next_flush(ends_at),
                self._takeover_at or math.inf,
                (self._uncommitted_since or math.inf) + self._params.commit_timeout,
            )
            messages = []
            if allowance > waiting and self._streaming:
                wait = min(max(wake - now, 0.0), SUBSCRIPTION_POLL_SECONDS)
                most = min(allowance - waiting, MESSAGES_PER_POLL)
                messages = await self._kafka(self._poll, wait, most)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), max(wake - now, 0.0))
            taken, limit_reached = self._batcher.take(messages, allowance)
            out += taken
            now = time.monotonic()
            over = limit_reached or now >= ends_at
            # What waits fills the allowance, spread over partitions none of which has a full
            # batch: nothing more is read before a commit, so it goes now, not at the flush
            # timeout (Nakadi, reading ahead, would send as much in fuller batches).
            waiting = sum(len(batch.pending) for batch in self._streaming.values())
            stuck = 0 < waiting >= self._params.max_uncommitted - self._uncommitted()
            out += self._batcher.due(now, over or stuck)
            if out:
                if debug:
                    out[0] = _with_info(out[0], debug)
                    debug = ""
                if any(b'"events"' in line for line in out):
                    self._last_sent_at = now
                yield b"".join(out)
            if over or self._batcher.keep_alive_limit_reached():
                return

    async def close(self) -> None:
        """The stream is over: what it sent stays committable for commit_timeout, the rest moves."""
        if self._closed:
            return
        self._closed = True
        self._streams.coordinator.local_sessions.discard(self.stream_id)
        await self._kafka(self._close_consumer)
        self._executor.shutdown(wait=False)
        remaining = (
            0.0
            if self._commit_timed_out
            else max(self._params.commit_timeout - (time.monotonic() - self._last_sent_at), 0.0)
        )
        async with _locked(self._store, self.subscription_id) as (conn, row):
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
            await _rebalance(conn, self.subscription_id)


class _SessionResponse(StreamingResponse):
    """Closes the session whatever ends the response; the close survives the cancellation."""

    def __init__(self, session: Session, waiter: contextlib.ExitStack, gzip: bool) -> None:
        headers = {STREAM_ID_HEADER: session.stream_id}
        if gzip:
            headers["Content-Encoding"] = "gzip"
        body = _gzipped(session.lines()) if gzip else session.lines()
        super().__init__(body, media_type=STREAM_MEDIA_TYPE, headers=headers)
        self._session = session
        self._waiter = waiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await self._session.close()
                finally:
                    self._waiter.close()


class SubscriptionStreams:
    def __init__(
        self,
        subscriptions: Subscriptions,
        coordinator: Coordinator,
        bootstrap: str,
        watermarks: Watermarks,
    ) -> None:
        self.subscriptions = subscriptions
        self.store = subscriptions.store
        self.coordinator = coordinator
        self.bootstrap = bootstrap
        self.watermarks = watermarks

    async def _subscription(self, request: Request) -> Subscription | Response:
        """The subscription the path names, or the 404 to answer."""
        subscription_id = request.path_params["id"]
        found = await self.subscriptions.get(subscription_id)
        return not_found(subscription_id) if found is None else found

    async def stream(self, request: Request) -> Response:
        subscription = await self._subscription(request)
        if isinstance(subscription, Response):
            return subscription
        values: dict[str, Any] = dict(request.query_params)
        if request.method == "POST":
            try:
                body = await bodies.json_body(request)
            except bodies.BadBody as bad:
                return bad.response
            if not isinstance(body, dict):
                return problem(400, "the body must be an object of stream parameters")
            values.update(body)
        try:
            params = parse_params(values)
            topics = await self.subscriptions.topics(subscription.event_types)
        except LimitError as error:
            return problem(422, str(error))
        except SubscriptionError as error:
            return error.response()
        stream_id = str(uuid.uuid4())
        waiter = contextlib.ExitStack()
        # Listening before the session exists: no notification about it can be missed.
        changed = waiter.enter_context(self.coordinator.waiter(subscription.id))
        try:
            await self._open_session(subscription, stream_id, params)
        except SubscriptionError as error:
            waiter.close()
            return error.response()
        self.coordinator.local_sessions.add(stream_id)
        log.info(
            "subscription stream started",
            extra=logs.fields(subscription_id=subscription.id, stream_id=stream_id),
        )
        session = Session(self, subscription, stream_id, params, topics, changed)
        return _SessionResponse(session, waiter, _wants_gzip(request))

    async def _open_session(
        self, subscription: Subscription, stream_id: str, params: StreamParams
    ) -> None:
        async with _locked(self.store, subscription.id) as (conn, row):
            if row is None:
                raise SubscriptionError(404, f"Subscription {subscription.id} does not exist")
            if row["resetting"]:
                raise SubscriptionError(409, "Cursors reset is in progress for this subscription")
            await self.subscriptions.initialise(conn, subscription)
            cur = await conn.execute(
                "SELECT event_type, partition FROM broker_subscription_partitions"
                " WHERE subscription_id = %s",
                (subscription.id,),
            )
            keys = {(e, p) for e, p in await cur.fetchall()}
            foreign = sorted(params.requested - keys)
            if foreign:
                raise SubscriptionError(
                    422, f"partitions {foreign} do not belong to this subscription"
                )
            cur = await conn.execute(
                "SELECT requested FROM broker_subscription_sessions"
                " WHERE subscription_id = %s AND closed_at IS NULL AND alive_until > now()",
                (subscription.id,),
            )
            live = [r[0] for r in await cur.fetchall()]
            if len(live) >= len(keys):
                raise SubscriptionError(
                    409,
                    f"No free slots for streaming available: {len(live)} streams read all"
                    f" {len(keys)} partitions of this subscription",
                )
            taken = {(e, int(p)) for requested in live for e, p in requested}
            clash = sorted(params.requested & taken)
            if clash:
                raise SubscriptionError(
                    409, f"partitions {clash} are already requested directly by another stream"
                )
            await conn.execute(
                "INSERT INTO broker_subscription_sessions"
                " (stream_id, subscription_id, requested, commit_timeout, alive_until)"
                " VALUES (%s, %s, %s, %s, now() + make_interval(secs => %s))",
                (
                    stream_id,
                    subscription.id,
                    json.dumps(sorted([e, str(p)] for e, p in params.requested)),
                    params.commit_timeout,
                    ALIVE_SECONDS,
                ),
            )
            await _rebalance(conn, subscription.id)

    async def commit(self, request: Request) -> Response:
        subscription = await self._subscription(request)
        if isinstance(subscription, Response):
            return subscription
        stream_id = request.headers.get(STREAM_ID_HEADER)
        if not stream_id:
            return problem(400, f"the {STREAM_ID_HEADER} header is required to commit")
        try:
            body = await bodies.json_body(request)
            items = _cursor_items(body, subscription, with_token=True)
        except bodies.BadBody as bad:
            return bad.response
        except SubscriptionError as error:
            return error.response()
        try:
            results = await self._commit(subscription, stream_id, items)
        except SubscriptionError as error:
            return error.response()
        if all(r == "committed" for r in results):
            return Response(status_code=204)
        return JSONResponse(
            {
                "items": [
                    {"cursor": item, "result": result}
                    for item, result in zip(items, results, strict=True)
                ]
            }
        )

    async def _commit(
        self, subscription: Subscription, stream_id: str, items: list[dict[str, Any]]
    ) -> list[str]:
        unknown = SubscriptionError(
            422, f"Session with stream id {stream_id} not found (it ended or never existed)"
        )
        if not valid_id(stream_id):
            raise unknown
        offsets = [_kafka_offset(item) for item in items]
        async with _locked(self.store, subscription.id) as (conn, row):
            if row is None:
                raise SubscriptionError(404, f"Subscription {subscription.id} does not exist")
            # The session and the partitions in one round trip: commits are the hot path.
            cur = await conn.execute(
                "SELECT s.may_commit, p.event_type, p.partition, p.committed, p.owner::text,"
                " p.release_offset FROM (SELECT closed_at IS NULL OR commit_deadline > now()"
                " AS may_commit FROM broker_subscription_sessions"
                " WHERE stream_id = %s AND subscription_id = %s) s"
                " LEFT JOIN broker_subscription_partitions p ON p.subscription_id = %s",
                (stream_id, subscription.id, subscription.id),
            )
            rows = await cur.fetchall()
            if not rows or not rows[0][0]:
                raise unknown
            partitions = {(e, p): [c, o, r] for _, e, p, c, o, r in rows if e is not None}
            for item in items:
                key = (item["event_type"], int(item["partition"]))
                if key not in partitions:
                    raise SubscriptionError(
                        422, f"partition {key[1]} of {key[0]} is not part of the subscription"
                    )
                if partitions[key][1] != stream_id:
                    raise SubscriptionError(
                        422,
                        f"Cursor for partition {key[1]} of {key[0]} can't be committed: the"
                        f" partition is not assigned to stream {stream_id}",
                    )
            results = []
            moved: set[PartitionKey] = set()
            for item, offset in zip(items, offsets, strict=True):
                key = (item["event_type"], int(item["partition"]))
                if offset > partitions[key][0]:
                    partitions[key][0] = offset
                    moved.add(key)
                    results.append("committed")
                else:
                    results.append("outdated")
            if not moved:
                return results
            async with conn.pipeline():
                for key in sorted(moved):
                    committed, _, release_offset = partitions[key]
                    handed = release_offset is not None and committed >= release_offset
                    await conn.execute(
                        "UPDATE broker_subscription_partitions SET committed = %s"
                        + (
                            ", owner = next_owner, next_owner = NULL, release_offset = NULL,"
                            " release_deadline = NULL"
                            if handed
                            else ""
                        )
                        + " WHERE subscription_id = %s AND event_type = %s AND partition = %s",
                        (committed, subscription.id, *key),
                    )
                await conn.execute(*notify_sql(subscription.id))
        return results

    async def cursors(self, request: Request) -> Response:
        subscription = await self._subscription(request)
        if isinstance(subscription, Response):
            return subscription
        async with self.store.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT event_type, partition, committed FROM broker_subscription_partitions"
                " WHERE subscription_id = %s ORDER BY event_type, partition",
                (subscription.id,),
            )
            rows = await cur.fetchall()
        timelines = await self.subscriptions.existing_topics(subscription.event_types)
        return JSONResponse(
            {
                "items": [
                    {
                        "event_type": event_type,
                        "partition": str(partition),
                        "offset": format_offset(committed, timelines[event_type].timeline),
                        "cursor_token": str(uuid.uuid4()),
                    }
                    for event_type, partition, committed in rows
                    if event_type in timelines
                ]
            }
        )

    async def reset(self, request: Request) -> Response:
        """PATCH cursors: streams are closed, offsets set, new streams get 409 until they ended."""
        subscription = await self._subscription(request)
        if isinstance(subscription, Response):
            return subscription
        try:
            body = await bodies.json_body(request)
            items = _cursor_items(body, subscription, with_token=False)
            topics = await self.subscriptions.topics(subscription.event_types)
            positions = await self.subscriptions.start_positions(topics, items)
        except bodies.BadBody as bad:
            return bad.response
        except SubscriptionError as error:
            return error.response()
        with self.coordinator.waiter(subscription.id) as changed:
            async with _locked(self.store, subscription.id) as (conn, row):
                if row is None:
                    return not_found(subscription.id)
                if row["resetting"]:
                    return problem(409, "Cursors reset is already in progress for the subscription")
                await self.subscriptions.initialise(conn, subscription)
                async with conn.cursor() as cur:
                    await cur.executemany(
                        "UPDATE broker_subscription_partitions SET committed = %s"
                        " WHERE subscription_id = %s AND event_type = %s AND partition = %s",
                        [(pos, subscription.id, *key) for key, pos in positions.items()],
                    )
                await conn.execute(
                    "UPDATE broker_subscription_partitions SET owner = NULL, next_owner = NULL,"
                    " release_offset = NULL, release_deadline = NULL WHERE subscription_id = %s",
                    (subscription.id,),
                )
                # Closed streams can no longer commit: nothing undoes the reset.
                cur = await conn.execute(
                    "UPDATE broker_subscription_sessions SET closed_at = now(),"
                    " commit_deadline = now() WHERE subscription_id = %s AND closed_at IS NULL"
                    " RETURNING stream_id",
                    (subscription.id,),
                )
                closed = [r[0] for r in await cur.fetchall()]
                await conn.execute(
                    "UPDATE broker_subscriptions"
                    " SET reset_until = now() + make_interval(secs => %s) WHERE id = %s",
                    (RESET_WAIT_SECONDS, subscription.id),
                )
                await conn.execute(*notify_sql(subscription.id))
            log.info(
                "subscription cursors reset",
                extra=logs.fields(subscription_id=subscription.id, streams_closed=len(closed)),
            )
            await self._wait_finished(closed, changed)
        async with self.store.pool.connection() as conn:
            await conn.execute(
                "UPDATE broker_subscriptions SET reset_until = NULL WHERE id = %s",
                (subscription.id,),
            )
        return Response(status_code=204)

    async def _wait_finished(self, stream_ids: list[Any], changed: asyncio.Event) -> None:
        """Until every closed stream's response ended (or its process is gone, or time is up).

        A stream that ends notifies; a process that died stops renewing its sessions, so
        the wait also ends when the last of them would have had to be renewed.
        """
        deadline = time.monotonic() + RESET_WAIT_SECONDS
        while stream_ids and time.monotonic() < deadline:
            changed.clear()
            async with self.store.pool.connection() as conn:
                cur = await conn.execute(
                    "SELECT extract(epoch FROM max(alive_until) - now())"
                    " FROM broker_subscription_sessions"
                    " WHERE stream_id = ANY(%s) AND NOT finished AND alive_until > now()",
                    (stream_ids,),
                )
                row = await cur.fetchone()
            if row is None or row[0] is None:
                return
            wait = min(float(row[0]), deadline - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), max(wait, 0.0))

    async def _partition_rows(self, subscription: Subscription) -> list[dict[str, Any]]:
        async with self.store.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "SELECT p.event_type, p.partition, p.committed, p.owner::text,"
                " p.next_owner::text, p.assignment_type,"
                " coalesce(s.closed_at IS NULL AND s.alive_until > now(), false) AS live"
                " FROM broker_subscription_partitions p"
                " LEFT JOIN broker_subscription_sessions s ON s.stream_id = p.owner"
                " WHERE p.subscription_id = %s ORDER BY p.event_type, p.partition",
                (subscription.id,),
            )
            return await cur.fetchall()

    async def status(self, subscription: Subscription) -> list[dict[str, Any]]:
        """Each event type's partitions: state, stream and assignment type (no Kafka needed)."""
        rows = {
            (r["event_type"], r["partition"]): r for r in await self._partition_rows(subscription)
        }
        topics = await self.subscriptions.existing_topics(subscription.event_types)
        out = []
        for name, topic in sorted(topics.items()):
            partitions = []
            for p in range(topic.partitions):
                row = rows.get((name, p))
                item: dict[str, Any] = {"partition": str(p), "state": "unassigned"}
                if row is not None and row["next_owner"] is not None:
                    item["state"] = "reassigning"
                elif row is not None and row["live"]:
                    item["state"] = "assigned"
                if item["state"] != "unassigned" and row is not None:
                    item["stream_id"] = row["owner"] or row["next_owner"]
                    item["assignment_type"] = row["assignment_type"]
                partitions.append(item)
            out.append({"event_type": name, "partitions": partitions})
        return out

    async def stats(self, request: Request) -> Response:
        subscription = await self._subscription(request)
        if isinstance(subscription, Response):
            return subscription
        items = await self.status(subscription)
        committed = {
            (r["event_type"], r["partition"]): r["committed"]
            for r in await self._partition_rows(subscription)
        }
        if not committed:
            return JSONResponse({"items": items})
        topics = await self.subscriptions.existing_topics(subscription.event_types)
        time_lag = request.query_params.get("show_time_lag", "false").lower() == "true"
        for item in items:
            topic = topics[item["event_type"]]
            marks = await self.watermarks.of(topic.topic, range(topic.partitions))
            behind: dict[int, int] = {}
            for partition in item["partitions"]:
                p = int(partition["partition"])
                position = committed[(item["event_type"], p)]
                partition["unconsumed_events"] = max(marks[p].newest_position - position, 0)
                if partition["unconsumed_events"]:
                    behind[p] = position + 1
            if time_lag:
                ages = await asyncio.to_thread(_ages, self.bootstrap, topic.topic, behind)
                for partition in item["partitions"]:
                    partition["consumer_lag_seconds"] = ages.get(int(partition["partition"]), 0)
        return JSONResponse({"items": items})

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/subscriptions/{id}/events", self.stream, methods=["GET", "POST"]),
            Route("/subscriptions/{id}/cursors", self.cursors, methods=["GET"]),
            Route("/subscriptions/{id}/cursors", self.commit, methods=["POST"]),
            Route("/subscriptions/{id}/cursors", self.reset, methods=["PATCH"]),
            Route("/subscriptions/{id}/stats", self.stats, methods=["GET"]),
        ]


def _ages(bootstrap: str, topic: str, oldest: Mapping[int, int]) -> dict[int, float]:
    """Seconds since the oldest unconsumed event of each partition was stored (blocking)."""
    if not oldest:
        return {}
    consumer = Consumer(consumer_config(bootstrap) | STREAM_CONSUMER_SETTINGS)
    ages: dict[int, float] = {}
    try:
        consumer.assign([TopicPartition(topic, p, offset) for p, offset in oldest.items()])
        deadline = time.monotonic() + TIME_LAG_READ_SECONDS
        while len(ages) < len(oldest) and time.monotonic() < deadline:
            message = consumer.poll(max(deadline - time.monotonic(), 0))
            if message is None or message.error() is not None:
                continue
            partition = message.partition()
            if partition is not None and partition in oldest and partition not in ages:
                _, stored_ms = message.timestamp()
                ages[partition] = max(time.time() - stored_ms / 1000, 0.0)
                consumer.incremental_unassign([TopicPartition(topic, partition)])
    finally:
        consumer.close()
    return ages


def _cursor_items(
    body: object, subscription: Subscription, *, with_token: bool
) -> list[dict[str, Any]]:
    """``{"items": [cursor, ...]}`` with every cursor's fields present and of the subscription."""
    if not isinstance(body, dict) or not isinstance(body.get("items"), list):
        raise SubscriptionError(422, 'the body must be {"items": [cursors]}')
    items = body["items"]
    if with_token and not items:
        raise SubscriptionError(422, "items must not be empty")
    for item in items:
        if not isinstance(item, dict) or not all(
            isinstance(item.get(k), str) for k in ("event_type", "partition", "offset")
        ):
            raise SubscriptionError(
                422, f"each cursor needs event_type, partition and offset strings, got {item!r}"
            )
        if item["event_type"] not in subscription.event_types:
            raise SubscriptionError(
                422, f"event type {item['event_type']} is not part of the subscription"
            )
        if not whole_number(item["partition"]):
            raise SubscriptionError(422, f"partition {item['partition']!r} is not a partition")
    return items


def _kafka_offset(item: Mapping[str, str]) -> int:
    try:
        offset = parse_offset(item["offset"])
    except OffsetFormatError:
        offset = None
    if offset is None or offset.kafka_offset is None:
        raise SubscriptionError(422, f"invalid offset {item['offset']!r} in a commit")
    return offset.kafka_offset


async def close_expired(store: Store) -> None:
    """Close the sessions whose process stopped renewing them, and rebalance their partitions.

    Sessions that can no longer commit are deleted after ``SESSION_RETENTION_SECONDS``: nothing
    reads them any more (a partition whose owner is unknown is simply free).
    """
    async with store.pool.connection() as conn:
        await conn.execute(
            "DELETE FROM broker_subscription_sessions WHERE finished"
            " AND commit_deadline < now() - make_interval(secs => %s)",
            (SESSION_RETENTION_SECONDS,),
        )
        cur = await conn.execute(
            "SELECT DISTINCT subscription_id::text FROM broker_subscription_sessions"
            " WHERE closed_at IS NULL AND alive_until < now()"
        )
        expired = [row[0] for row in await cur.fetchall()]
    for subscription_id in expired:
        async with _locked(store, subscription_id) as (conn, row):
            if row is None:
                continue
            # Its process is gone: nobody can commit for it any more.
            await conn.execute(
                "UPDATE broker_subscription_sessions SET closed_at = alive_until,"
                " commit_deadline = alive_until, finished = true"
                " WHERE subscription_id = %s AND closed_at IS NULL AND alive_until < now()",
                (subscription_id,),
            )
            await _rebalance(conn, subscription_id)
        log.warning(
            "subscription streams of a gone broker process closed",
            extra=logs.fields(subscription_id=subscription_id),
        )


class SubscriptionService:
    """Everything under ``/subscriptions`` for one app, and its notification listener."""

    def __init__(self, store: Store, pg_dsn: str, bootstrap: str, watermarks: Watermarks) -> None:
        self.subscriptions = Subscriptions(store, StoreResolver(store), watermarks)
        self.coordinator = Coordinator(pg_dsn, store.pool, lambda: close_expired(store))
        self.streams = SubscriptionStreams(
            self.subscriptions, self.coordinator, bootstrap, watermarks
        )
        self.api = SubscriptionApi(self.subscriptions, self.streams.status)

    async def start(self) -> None:
        await self.coordinator.start()

    async def stop(self) -> None:
        await self.coordinator.stop()

    def routes(self) -> list[BaseRoute]:
        return [*self.api.routes(), *self.streams.routes()]
