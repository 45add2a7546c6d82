"""Subscription streams, commits, cursors, resets and stats, coordinated across broker processes.

Postgres holds the truth (``sql/broker/002_subscriptions.sql``): sessions (one per
X-Nakadi-StreamId), the owner of every partition and its committed offset. Every
change runs in a transaction that first locks the subscription's row, so changes
to one subscription are serialised whichever process makes them, and ends with a
NOTIFY that wakes the subscription's streams in every process
(:mod:`broker.subscriptions.coordination`).

How a stream's partitions move between streams is in :mod:`broker.subscriptions.session`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

import anyio
from confluent_kafka import Consumer, TopicPartition
from psycopg.rows import dict_row
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from broker import bodies, metrics
from broker.errors import BadRequest, Conflict, SubscriptionNotFound
from broker.streams.api import STREAM_MEDIA_TYPE, _gzipped, _wants_gzip
from broker.streams.cursors import OffsetFormatError, format_offset, parse_offset
from broker.streams.event_stream import STREAM_CONSUMER_SETTINGS
from broker.streams.watermarks import Watermarks, consumer_config
from broker.subscriptions.coordination import ALIVE_SECONDS, Coordinator
from broker.subscriptions.session import (
    MAX_COMMIT_TIMEOUT,
    Session,
    StreamParams,
    parse_params,
)
from broker.subscriptions.store import (
    PartitionKey,
    Subscription,
    SubscriptionError,
    Subscriptions,
    locked,
    notify_sql,
    rebalance_partitions,
    valid_id,
    whole_number,
)
from changebroker import logs

log = logging.getLogger(__name__)

STREAM_ID_HEADER = "X-Nakadi-StreamId"
# How long a cursor reset waits for the streams it closed to end.
RESET_WAIT_SECONDS = MAX_COMMIT_TIMEOUT
TIME_LAG_READ_SECONDS = 5.0


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
        open_streams = metrics.open_streams.labels("subscription")
        open_streams.inc()
        try:
            await super().__call__(scope, receive, send)
        finally:
            open_streams.dec()
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

    async def _subscription(self, request: Request) -> Subscription:
        """The subscription the path names."""
        subscription_id = request.path_params["id"]
        found = await self.subscriptions.get(subscription_id)
        if found is None:
            raise SubscriptionNotFound(subscription_id)
        return found

    async def stream(self, request: Request) -> Response:
        subscription = await self._subscription(request)
        values: dict[str, Any] = dict(request.query_params)
        if request.method == "POST":
            body = await bodies.json_body(request)
            if not isinstance(body, dict):
                raise BadRequest("the body must be an object of stream parameters")
            values.update(body)
        params = parse_params(values)
        topics = await self.subscriptions.topics(subscription.event_types)
        stream_id = str(uuid.uuid4())
        waiter = contextlib.ExitStack()
        # Listening before the session exists: no notification about it can be missed.
        changed = waiter.enter_context(self.coordinator.waiter(subscription.id))
        try:
            await self._open_session(subscription, stream_id, params)
        except SubscriptionError:
            waiter.close()
            raise
        self.coordinator.local_sessions.add(stream_id)
        log.info(
            "subscription stream started",
            extra=logs.fields(subscription_id=subscription.id, stream_id=stream_id),
        )
        session = Session(
            self.store,
            self.bootstrap,
            self.coordinator.local_sessions,
            subscription,
            stream_id,
            params,
            topics,
            changed,
        )
        return _SessionResponse(session, waiter, _wants_gzip(request))

    async def _open_session(
        self, subscription: Subscription, stream_id: str, params: StreamParams
    ) -> None:
        async with locked(self.store, subscription.id) as (conn, row):
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
            await rebalance_partitions(conn, subscription.id)

    async def commit(self, request: Request) -> Response:
        subscription = await self._subscription(request)
        stream_id = request.headers.get(STREAM_ID_HEADER)
        if not stream_id:
            raise BadRequest(f"the {STREAM_ID_HEADER} header is required to commit")
        body = await bodies.json_body(request)
        items = _cursor_items(body, subscription, with_token=True)
        try:
            results = await self._commit(subscription, stream_id, items)
        except SubscriptionError:
            metrics.cursor_commits.labels("rejected").inc(len(items))
            raise
        for result in results:
            metrics.cursor_commits.labels(result).inc()
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
        async with locked(self.store, subscription.id) as (conn, row):
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
        body = await bodies.json_body(request)
        items = _cursor_items(body, subscription, with_token=False)
        topics = await self.subscriptions.topics(subscription.event_types)
        positions = await self.subscriptions.start_positions(topics, items)
        with self.coordinator.waiter(subscription.id) as changed:
            async with locked(self.store, subscription.id) as (conn, row):
                if row is None:
                    raise SubscriptionNotFound(subscription.id)
                if row["resetting"]:
                    raise Conflict("Cursors reset is already in progress for the subscription")
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
