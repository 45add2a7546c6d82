"""Subscription streams, commits, cursors, resets and stats, coordinated across broker processes.

Postgres holds the truth (``sql/broker/002_subscriptions.sql``): sessions (one per
X-Nakadi-StreamId), the owner of every partition and its committed offset. Every
change runs in a transaction that first locks the subscription's row, so changes
to one subscription are serialised whichever process makes them, and ends with a
NOTIFY that wakes the subscription's streams in every process
(:mod:`changebroker.broker.subscriptions.coordination`). Those statements are in
:mod:`changebroker.broker.subscriptions.store`; this module is their HTTP side.

How a stream's partitions move between streams is in
:mod:`changebroker.broker.subscriptions.session`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from changebroker import kafka, logs
from changebroker.auth import audit, principal_of
from changebroker.broker import bodies, metrics
from changebroker.broker.access import Access
from changebroker.broker.authorization import SUBSCRIPTION_BLOCKED
from changebroker.broker.avro.schemas import AvroSchemas
from changebroker.broker.errors import BadRequest, SubscriptionNotFound
from changebroker.broker.event_types.store import Store
from changebroker.broker.own_events.collector import OwnEvents
from changebroker.broker.streams.api import STREAM_MEDIA_TYPE, BatchStreamResponse, _wants_gzip
from changebroker.broker.streams.cursors import OffsetFormatError, offset_text, parse_offset
from changebroker.broker.streams.event_stream import STREAM_CONSUMER_SETTINGS, Streamed
from changebroker.broker.streams.transcode import AVRO_MEDIA_TYPE, Transcoder, wants_avro
from changebroker.broker.streams.watermarks import consumer_config
from changebroker.broker.subscriptions.coordination import Coordinator
from changebroker.broker.subscriptions.ids import valid_id
from changebroker.broker.subscriptions.session import DeadLetterSink, Session, parse_params
from changebroker.broker.subscriptions.store import (
    PartitionKey,
    Subscription,
    SubscriptionChanged,
    SubscriptionError,
    Subscriptions,
    unknown_session,
)
from changebroker.broker.timelines.clusters import Clusters
from changebroker.broker.timelines.model import PositionError, Timelines
from changebroker.numerals import whole_number

log = logging.getLogger(__name__)

STREAM_ID_HEADER = "X-Nakadi-StreamId"
TIME_LAG_READ_SECONDS = 5.0


class _SessionResponse(BatchStreamResponse):
    """Closes the session when the response ends."""

    kind = "subscription"

    def __init__(
        self,
        session: Session,
        lines: AsyncIterator[bytes],
        waiter: contextlib.ExitStack,
        gzip: bool,
        media_type: str,
    ) -> None:
        super().__init__(lines, gzip, {STREAM_ID_HEADER: session.stream_id}, media_type)
        self._session = session
        self._waiter = waiter

    async def ended(self) -> None:
        try:
            await self._session.close()
        finally:
            self._waiter.close()


@dataclass(frozen=True)
class SubscriptionStreams:
    subscriptions: Subscriptions
    coordinator: Coordinator
    clusters: Clusters
    access: Access
    # The longest commit_timeout a stream may have; also how long a cursor reset waits for
    # the streams it closed to end.
    max_commit_timeout: float
    memory_limit: int
    avro: AvroSchemas
    # Publishes the events the broker writes itself (the dead-letter queue's).
    dead_letters: DeadLetterSink
    own: OwnEvents

    @property
    def store(self) -> Store:
        return self.subscriptions.store

    async def _subscription(self, request: Request) -> Subscription:
        """The subscription the path names."""
        subscription_id = request.path_params["id"]
        found = await self.subscriptions.get(subscription_id)
        if found is None:
            raise SubscriptionNotFound(subscription_id)
        return found

    async def stream(self, request: Request) -> Response:
        subscription = await self._subscription(request)
        principal = principal_of(request)
        await self.access.require_consume(
            principal, subscription.event_types, subscription.authorization, subscription.id
        )
        values: dict[str, Any] = dict(request.query_params)
        if request.method == "POST":
            body = await bodies.json_body(request)
            if not isinstance(body, dict):
                raise BadRequest("the body must be an object of stream parameters")
            values.update(body)
        params = parse_params(values, self.max_commit_timeout)
        topics = await self.subscriptions.topics(subscription.event_types)
        streamed: Streamed = {}
        transcode = Transcoder(
            self.avro, topics.values(), binary=wants_avro(request.headers.get("accept"))
        )
        stream_id = str(uuid.uuid4())
        waiter = contextlib.ExitStack()
        # Listening before the session exists: no notification about it can be missed.
        changed = waiter.enter_context(self.coordinator.waiter(subscription.id))
        try:
            await self.subscriptions.open_session(
                subscription, stream_id, params.requested, params.commit_timeout
            )
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
            self.subscriptions.timelines,
            self.coordinator.local_sessions,
            subscription,
            stream_id,
            params,
            topics,
            changed,
            memory_limit=self.memory_limit,
            blocked=self.access.consumption_blocked_check(principal, subscription.event_types),
            transcode=transcode,
            dead_letters=self.dead_letters,
            streamed=streamed,
        )
        lines = self.access.guarded(
            session.lines(), principal, subscription.event_types, subscription.id
        )
        lines = self.own.data_streamed(lines, streamed, principal, subscription.id)
        media_type = AVRO_MEDIA_TYPE if transcode.binary else STREAM_MEDIA_TYPE
        return _SessionResponse(session, lines, waiter, _wants_gzip(request), media_type)

    async def commit(self, request: Request) -> Response:
        # A consumer commits every batch: decide on the subscription as this process last read
        # it, checked under the commit's lock, rather than read it again first.
        remembered = self.subscriptions.remembered(request.path_params["id"])
        if remembered is not None:
            try:
                return await self._commit(request, remembered, checked=True)
            except SubscriptionChanged:
                self.subscriptions.forget(remembered.id)
        return await self._commit(request, await self._subscription(request), checked=False)

    async def _commit(
        self, request: Request, subscription: Subscription, *, checked: bool
    ) -> Response:
        # Committing is consuming: the subscription's readers, not blocked from consuming.
        await self.access.require_consume(
            principal_of(request),
            subscription.event_types,
            subscription.authorization,
            subscription.id,
            blocked_detail=SUBSCRIPTION_BLOCKED,
        )
        stream_id = request.headers.get(STREAM_ID_HEADER)
        if not stream_id:
            raise BadRequest(f"the {STREAM_ID_HEADER} header is required to commit")
        body = await bodies.json_body(request)
        items = _cursor_items(body, subscription, with_token=True)
        if not valid_id(stream_id):
            raise unknown_session(stream_id)
        cursors = [
            ((i["event_type"], int(i["partition"])), await self._committed_offset(i)) for i in items
        ]
        try:
            results = await self.subscriptions.commit(
                subscription.id, stream_id, cursors, checked=subscription if checked else None
            )
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

    async def _committed_offset(self, item: Mapping[str, str]) -> int:
        """The position a cursor to commit names; ``BEGIN`` is before the oldest event the
        partition holds (a partition that is not the subscription's is refused later)."""
        timelines = (await self.subscriptions.topics([item["event_type"]]))[item["event_type"]]
        try:
            offset = parse_offset(item["offset"], timelines.all[0].order)
        except OffsetFormatError:
            raise SubscriptionError(422, f"invalid offset {item['offset']!r} in a commit") from None
        partition = int(item["partition"])
        if partition >= timelines.partitions:
            return -1
        if offset.kafka_offset is None:
            return (await self.clusters.bounds(timelines, [partition]))[partition].oldest
        try:
            return timelines.position(offset.timeline, offset.kafka_offset, partition)
        except PositionError as error:
            raise SubscriptionError(
                422, f"invalid offset {item['offset']!r} in a commit: {error}"
            ) from None

    async def cursors(self, request: Request) -> Response:
        subscription = await self._subscription(request)
        await self.access.require_unblocked_consumer(
            principal_of(request), subscription.event_types, SUBSCRIPTION_BLOCKED
        )
        rows = await self.subscriptions.committed(subscription.id)
        timelines = await self.subscriptions.existing_topics(subscription.event_types)
        return JSONResponse(
            {
                "items": [
                    {
                        "event_type": event_type,
                        "partition": str(partition),
                        "offset": offset_text(timelines[event_type], committed, partition),
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
        principal = principal_of(request)
        await self.access.require_unblocked_consumer(
            principal, subscription.event_types, SUBSCRIPTION_BLOCKED
        )
        await self.access.require(
            principal, subscription.authorization, "admin", f"subscription {subscription.id}"
        )
        body = await bodies.json_body(request)
        items = _cursor_items(body, subscription, with_token=False)
        topics = await self.subscriptions.topics(subscription.event_types)
        positions = await self.subscriptions.start_positions(topics, items)
        with self.coordinator.waiter(subscription.id) as changed:
            closed = await self.subscriptions.reset(
                subscription, positions, self.max_commit_timeout
            )
            log.info(
                "subscription cursors reset",
                extra=logs.fields(subscription_id=subscription.id, streams_closed=len(closed)),
            )
            await self._wait_finished(closed, changed)
        await self.subscriptions.end_reset(subscription.id)
        audit("cursors reset", principal, subscription.id)
        return Response(status_code=204)

    async def _wait_finished(self, stream_ids: list[Any], changed: asyncio.Event) -> None:
        """Until every closed stream's response ended (or its process is gone, or time is up).

        A stream that ends notifies; a process that died stops renewing its sessions, so
        the wait also ends when the last of them would have had to be renewed.
        """
        deadline = time.monotonic() + self.max_commit_timeout
        while stream_ids and time.monotonic() < deadline:
            changed.clear()
            alive = await self.subscriptions.seconds_alive(stream_ids)
            if alive is None:
                return
            wait = min(alive, deadline - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), max(wait, 0.0))

    async def status(
        self,
        subscription: Subscription,
        lags: Mapping[PartitionKey, Mapping[str, int]] | None = None,
    ) -> list[dict[str, Any]]:
        """Each event type's partitions: state, stream and assignment type (no Kafka needed),
        with the ``lags`` fields of each partition when given; in Nakadi's field order, which
        clients compare as text. An unassigned partition's stream is ``""``."""
        found = await self.subscriptions.partition_rows(subscription.id)
        rows = {(r["event_type"], r["partition"]): r for r in found}
        topics = await self.subscriptions.existing_topics(subscription.event_types)
        out = []
        for name, topic in sorted(topics.items()):
            partitions = []
            for p in range(topic.partitions):
                row = rows.get((name, p))
                state = "unassigned"
                if row is not None and row["next_owner"] is not None:
                    state = "reassigning"
                elif row is not None and row["live"]:
                    state = "assigned"
                item: dict[str, Any] = {
                    "partition": str(p),
                    "state": state,
                    **(lags or {}).get((name, p), {}),
                    "stream_id": "",
                }
                if state != "unassigned" and row is not None:
                    item["stream_id"] = row["owner"] or row["next_owner"]
                    item["assignment_type"] = row["assignment_type"]
                partitions.append(item)
            out.append({"event_type": name, "partitions": partitions})
        return out

    async def stats(self, request: Request) -> Response:
        subscription = await self._subscription(request)
        time_lag = request.query_params.get("show_time_lag", "false").lower() == "true"
        committed = {
            (r["event_type"], r["partition"]): r["committed"]
            for r in await self.subscriptions.partition_rows(subscription.id)
        }
        # Unconsumed events once the subscription has cursors (it streamed or was reset).
        lags: dict[PartitionKey, dict[str, int]] = {}
        topics = await self.subscriptions.existing_topics(subscription.event_types)
        for name, timelines in topics.items() if committed else ():
            found = await self.clusters.bounds(timelines, range(timelines.partitions))
            behind: dict[int, int] = {}
            for p in range(timelines.partitions):
                # A partition added since the subscription last read its rows: nothing read.
                position = committed.get((name, p), found[p].oldest)
                lags[(name, p)] = {"unconsumed_events": max(found[p].newest - position, 0)}
                if lags[(name, p)]["unconsumed_events"]:
                    behind[p] = position
            if time_lag:
                ages = await asyncio.to_thread(_ages, timelines, behind)
                for p in range(timelines.partitions):
                    lags[(name, p)]["consumer_lag_seconds"] = ages.get(p, 0)
        return JSONResponse({"items": await self.status(subscription, lags)})

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/subscriptions/{id}/events", self.stream, methods=["GET", "POST"]),
            Route("/subscriptions/{id}/cursors", self.cursors, methods=["GET"]),
            Route("/subscriptions/{id}/cursors", self.commit, methods=["POST"]),
            Route("/subscriptions/{id}/cursors", self.reset, methods=["PATCH"]),
            Route("/subscriptions/{id}/stats", self.stats, methods=["GET"]),
        ]


def _ages(timelines: Timelines, consumed: Mapping[int, int]) -> dict[int, int]:
    """Whole seconds since the oldest unconsumed event of each partition was stored (blocking;
    ``consumed``: partition -> position consumed up to); whole as Nakadi's (a Java client
    reading a fraction failed with a ClassCastException)."""
    by_topic: dict[tuple[kafka.Cluster, str], dict[int, int]] = {}
    for partition, position in consumed.items():
        timeline, offset = timelines.at(position, partition)
        by_topic.setdefault((timeline.cluster, timeline.topic), {})[partition] = offset
    ages: dict[int, int] = {}
    for (cluster, topic), oldest in by_topic.items():
        ages |= topic_ages(cluster, topic, oldest)
    return ages


def topic_ages(cluster: kafka.Cluster, topic: str, oldest: Mapping[int, int]) -> dict[int, int]:
    """Whole seconds since the event at each partition's offset in ``oldest`` was stored."""
    if not oldest:
        return {}
    consumer = Consumer(consumer_config(cluster) | STREAM_CONSUMER_SETTINGS)
    ages: dict[int, int] = {}
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
                ages[partition] = max(int(time.time() - stored_ms / 1000), 0)
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
