"""Subscriptions in Postgres (``sql/broker/002_subscriptions.sql``) and the lock every change takes.

A subscription is identified by (owning_application, event_types, consumer_group):
creating it again answers 200 with the one that exists. Its cursors are set when it
is first streamed or reset (``initialise``), from ``read_from``: ``begin``, ``end``
or ``initial_cursors``. Sessions, commits and cursor resets are here too. Every
change to a subscription's streams runs under its row lock: :func:`locked`, or for a
commit, the one statement of ``sql/broker/006_commit_cursors.sql``;
:func:`rebalance_partitions` re-assigns its partitions and :func:`close_expired` frees
those of broker processes that are gone. The HTTP side is
:mod:`changebroker.broker.subscriptions.api` and
:mod:`changebroker.broker.subscriptions.stream_api`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from changebroker import logs
from changebroker.auth import Principal
from changebroker.broker.annotations import KINDS, annotations_problems
from changebroker.broker.authorization import section_problem
from changebroker.broker.errors import (
    AUTHORIZATION_KEPT,
    BrokerError,
    Conflict,
    SubscriptionNotFound,
)
from changebroker.broker.event_types.store import Store, _utc
from changebroker.broker.streams.cursors import Cursor, CursorError, parse_cursor, position
from changebroker.broker.subscriptions import coordination, dead_letters, rebalance
from changebroker.broker.subscriptions.coordination import notify_sql
from changebroker.broker.subscriptions.ids import valid_id
from changebroker.broker.timelines.clusters import Clusters
from changebroker.broker.timelines.model import Timelines
from changebroker.broker.timelines.store import TimelineStore

log = logging.getLogger(__name__)

READ_FROM = ("begin", "end", "cursors")
DEFAULT_CONSUMER_GROUP = "default"
DEFAULT_PAGE = 20
MAX_PAGE = 1000
# How long ended sessions stay, for whoever looks at them by hand.
SESSION_RETENTION_SECONDS = 3600.0

PartitionKey = tuple[str, int]
_LARGEST_INT = 2**31 - 1  # Postgres's int, a partition's type
# Subscriptions a process remembers for commits; past this many it starts again.
_REMEMBERED = 10_000


class SubscriptionError(BrokerError):
    """The request cannot be served: ``status`` and ``detail`` make its Problem."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail, status=status)


class SubscriptionChanged(Exception):
    """A remembered subscription is no longer what Postgres holds (its authorization changed,
    or it was deleted): read it again and decide again."""


@dataclass(frozen=True)
class Subscription:
    id: str
    owning_application: str
    event_types: list[str]
    consumer_group: str
    read_from: str
    initial_cursors: list[dict[str, str]] | None
    authorization: dict[str, Any] | None
    annotations: dict[str, str] | None
    labels: dict[str, str] | None
    created_at: datetime
    updated_at: datetime

    def body(self) -> dict[str, Any]:
        """As Nakadi writes a Subscription: its fields in its order, the ones never set as
        ``[]`` (initial_cursors) or ``null`` (authorization, annotations, labels)."""
        return {
            "owning_application": self.owning_application,
            "event_types": self.event_types,
            "consumer_group": self.consumer_group,
            "read_from": self.read_from,
            "initial_cursors": self.initial_cursors or [],
            "authorization": self.authorization,
            "annotations": self.annotations,
            "labels": self.labels,
            "id": self.id,
            "created_at": _utc(self.created_at),
            "updated_at": _utc(self.updated_at),
        }


_COLUMNS = (
    "id::text, owning_application, event_types, consumer_group, read_from, initial_cursors,"
    " authz AS authorization, annotations, labels, created_at, updated_at"
)


def _subscription(row: Mapping[str, Any]) -> Subscription:
    return Subscription(
        row["id"],
        row["owning_application"],
        list(row["event_types"]),
        row["consumer_group"],
        row["read_from"],
        row["initial_cursors"],
        row["authorization"],
        row["annotations"],
        row["labels"],
        row["created_at"],
        row["updated_at"],
    )


def storable(value: object) -> bool:
    """False if a string in ``value`` holds NUL, which Postgres text and jsonb refuse."""
    if isinstance(value, str):
        return "\x00" not in value
    if isinstance(value, dict):
        return all(storable(k) and storable(v) for k, v in value.items())
    if isinstance(value, list):
        return all(storable(v) for v in value)
    return True


@dataclass(frozen=True)
class Subscriptions:
    """Subscriptions in Postgres; every method asks Postgres, so broker processes agree."""

    store: Store
    timelines: TimelineStore
    clusters: Clusters
    # The most partitions the event types of one subscription may have together.
    max_partitions: int
    # As last read by ``get``: commits decide on these and check them under the lock.
    _remembered: dict[str, Subscription] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    async def get(self, subscription_id: str) -> Subscription | None:
        if not valid_id(subscription_id):
            return None
        async with self.store.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                f"SELECT {_COLUMNS} FROM broker_subscriptions WHERE id = %s", (subscription_id,)
            )
            row = await cur.fetchone()
        if row is None:
            self._remembered.pop(subscription_id, None)
            return None
        if len(self._remembered) >= _REMEMBERED:
            self._remembered.clear()
        found = self._remembered[subscription_id] = _subscription(row)
        return found

    def remembered(self, subscription_id: str) -> Subscription | None:
        """The subscription as ``get`` last read it here, if it did: possibly out of date, so
        only for a decision :meth:`commit` checks again (``checked``)."""
        return self._remembered.get(subscription_id)

    def forget(self, subscription_id: str) -> None:
        self._remembered.pop(subscription_id, None)

    async def existing_topics(self, event_types: list[str]) -> dict[str, Timelines]:
        """The timelines of those of ``event_types`` that still exist (one may have been
        deleted)."""
        found = {name: await self.timelines.of(name) for name in event_types}
        return {name: timelines for name, timelines in found.items() if timelines is not None}

    async def topics(self, event_types: list[str]) -> dict[str, Timelines]:
        """The timelines of ``event_types``; 422 names the ones that do not exist."""
        found = await self.existing_topics(event_types)
        missing = sorted(set(event_types) - set(found))
        if missing:
            raise SubscriptionError(422, f"event type(s) not found: {missing}")
        return found

    async def start_positions(
        self, topics: Mapping[str, Timelines], cursors: list[dict[str, str]]
    ) -> dict[PartitionKey, int]:
        """Positions of the last consumed event for ``cursors`` (begin / end / an offset).

        Every cursor must name a partition of an event type in ``topics``; 422 otherwise.
        """
        parsed: dict[PartitionKey, tuple[Timelines, Cursor, str]] = {}
        for item in cursors:
            if not isinstance(item, dict) or not isinstance(item.get("event_type"), str):
                raise SubscriptionError(422, f"each cursor needs an event_type, got {item!r}")
            topic = topics.get(item["event_type"])
            if topic is None:
                raise SubscriptionError(
                    422, f"event type {item['event_type']} is not part of the subscription"
                )
            offset = item.get("offset")
            # Cursors here may also say "end": after the newest event.
            as_sent = "begin" if isinstance(offset, str) and offset.lower() == "end" else offset
            try:
                cursor = parse_cursor({**item, "offset": as_sent}, topic)
            except CursorError as error:
                raise SubscriptionError(422, str(error)) from None
            key = (item["event_type"], cursor.partition)
            if key in parsed:
                raise SubscriptionError(
                    422, f"more than one cursor for {key[0]} partition {key[1]}"
                )
            parsed[key] = (topic, cursor, str(offset))
        positions: dict[PartitionKey, int] = {}
        for name, timelines in topics.items():
            keys = [key for key in parsed if key[0] == name]
            if not keys:
                continue
            found = await self.clusters.bounds(timelines, [p for _, p in keys])
            for key in keys:
                _, cursor, offset = parsed[key]
                bound = found[key[1]]
                try:
                    positions[key] = (
                        bound.newest
                        if offset.lower() == "end"
                        else position(cursor, timelines, bound, name)
                    )
                except CursorError as error:
                    raise SubscriptionError(422, str(error)) from None
        return positions

    async def initial_positions(self, subscription: Subscription) -> dict[PartitionKey, int]:
        """Where a subscription never streamed starts, per partition, by its ``read_from``."""
        topics = await self.topics(subscription.event_types)
        if subscription.read_from == "cursors":
            return await self.start_positions(topics, subscription.initial_cursors or [])
        edge = "begin" if subscription.read_from == "begin" else "end"
        every = [
            {"event_type": name, "partition": str(p), "offset": edge}
            for name, topic in topics.items()
            for p in range(topic.partitions)
        ]
        return await self.start_positions(topics, every)

    async def initialise(
        self, conn: psycopg.AsyncConnection[Any], subscription: Subscription
    ) -> None:
        """Give every partition its starting offset, once; call under the subscription's lock."""
        cur = await conn.execute(
            "SELECT initialised FROM broker_subscriptions WHERE id = %s", (subscription.id,)
        )
        row = await cur.fetchone()
        if row is None or row[0]:
            return
        positions = await self.initial_positions(subscription)
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO broker_subscription_partitions"
                " (subscription_id, event_type, partition, committed) VALUES (%s, %s, %s, %s)",
                [(subscription.id, name, p, offset) for (name, p), offset in positions.items()],
            )
        await conn.execute(
            "UPDATE broker_subscriptions SET initialised = true WHERE id = %s", (subscription.id,)
        )

    async def create(
        self, body: object, may_create: Callable[[], Awaitable[None]]
    ) -> tuple[Subscription, bool]:
        """The subscription and whether it is new (201) or existed with the same key (200).
        ``may_create`` raises when a new one may not be made now; one that exists is still
        answered, as Nakadi does (clients create their subscription at every start)."""
        if not isinstance(body, dict):
            raise SubscriptionError(400, "the body must be a Subscription object")
        if not storable(body):
            raise SubscriptionError(422, "the subscription must not contain NUL characters")
        owner = body.get("owning_application")
        if not isinstance(owner, str) or not owner:
            raise SubscriptionError(422, "owning_application is required: a non-empty string")
        event_types = body.get("event_types")
        if (
            not isinstance(event_types, list)
            or not event_types
            or not all(isinstance(e, str) and e for e in event_types)
        ):
            raise SubscriptionError(422, "event_types is required: a non-empty array of names")
        group = body.get("consumer_group", DEFAULT_CONSUMER_GROUP)
        if not isinstance(group, str) or not group:
            raise SubscriptionError(422, "consumer_group must be a non-empty string")
        read_from = body.get("read_from", "end")
        if read_from not in READ_FROM:
            raise SubscriptionError(422, f"read_from must be one of {', '.join(READ_FROM)}")
        names = sorted(set(event_types))
        topics = await self.topics(names)
        total = sum(t.partitions for t in topics.values())
        if total > self.max_partitions:
            raise SubscriptionError(
                422,
                f"total partition count for subscription is {total}, but the maximum partition"
                f" count is {self.max_partitions}",
            )
        initial_cursors = body.get("initial_cursors")
        if read_from == "cursors":
            # Nakadi reads a missing initial_cursors as [], which covers no partition.
            cursors = [] if initial_cursors is None else initial_cursors
            if not isinstance(cursors, list):
                raise SubscriptionError(422, "initial_cursors must be an array of cursors")
            covered = await self.start_positions(topics, cursors)
            if len(covered) != total:
                raise SubscriptionError(
                    422, "initial_cursors should contain cursors for all partitions of subscription"
                )
        elif initial_cursors is not None and not isinstance(initial_cursors, list):
            # As Nakadi: read only for read_from cursors, otherwise kept as sent (Java clients
            # send [] with begin and end).
            raise SubscriptionError(422, "initial_cursors must be an array of cursors")
        authorization, annotations, labels = _described(body)
        key = (owner, names, group)
        existing = await self._with_key(*key)
        if existing is not None:
            return existing, False
        await may_create()
        async with self.store.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "INSERT INTO broker_subscriptions (id, owning_application, event_types,"
                " consumer_group, read_from, initial_cursors, authz, annotations, labels)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (owning_application, event_types, consumer_group) DO NOTHING"
                f" RETURNING {_COLUMNS}",
                (
                    str(uuid.uuid4()),
                    owner,
                    names,
                    group,
                    read_from,
                    None if initial_cursors is None else Jsonb(initial_cursors),
                    _jsonb(authorization),
                    _jsonb(annotations),
                    _jsonb(labels),
                ),
            )
            row = await cur.fetchone()
        if row is not None:
            return _subscription(row), True
        existing = await self._with_key(*key)
        assert existing is not None, "ON CONFLICT saw the row, so it exists"
        return existing, False

    async def _with_key(
        self, owner: str, event_types: list[str], group: str
    ) -> Subscription | None:
        async with self.store.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                f"SELECT {_COLUMNS} FROM broker_subscriptions"
                " WHERE owning_application = %s AND event_types = %s AND consumer_group = %s",
                (owner, event_types, group),
            )
            row = await cur.fetchone()
        return None if row is None else _subscription(row)

    async def page(
        self,
        owner: str | None,
        event_types: list[str],
        limit: int,
        offset: int,
        reader: Principal | None = None,
    ) -> list[Subscription]:
        """Newest first, ``limit`` at most. ``reader``: only subscriptions whose readers name
        it, by name or by a wildcard."""
        conditions: list[str] = ["true"]
        params: list[object] = []
        if reader is not None:
            conditions.append(
                "EXISTS (SELECT 1 FROM jsonb_array_elements(coalesce(authz->'readers', '[]'))"
                " a WHERE a->>'data_type' IN (%s, '*') AND a->>'value' IN (%s, '*'))"
            )
            params += [reader.type, reader.sub]
        if owner is not None:
            conditions.append("owning_application = %s")
            params.append(owner)
        if event_types:
            conditions.append("event_types @> %s")
            params.append(sorted(set(event_types)))
        async with self.store.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                f"SELECT {_COLUMNS} FROM broker_subscriptions WHERE {' AND '.join(conditions)}"
                " ORDER BY created_at DESC, id LIMIT %s OFFSET %s",
                (*params, limit, offset),
            )
            rows = await cur.fetchall()
        return [_subscription(r) for r in rows]

    async def delete(self, subscription_id: str) -> bool:
        if not valid_id(subscription_id):
            return False
        async with self.store.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                "DELETE FROM broker_subscriptions WHERE id = %s", (subscription_id,)
            )
            if cur.rowcount:
                # Its streams end: they find their session gone.
                await conn.execute(*notify_sql(subscription_id))
            return cur.rowcount > 0

    async def update(self, subscription_id: str, body: object) -> bool:
        """PUT changes ``authorization``, and ``annotations`` and ``labels`` when it sends them
        (the rest is immutable); False when not found."""
        current = await self.get(subscription_id)
        if current is None:
            return False
        if not isinstance(body, dict):
            raise SubscriptionError(400, "the body must be a Subscription object")
        if not storable(body):
            raise SubscriptionError(422, "the subscription must not contain NUL characters")
        for key in ("owning_application", "consumer_group", "read_from"):
            if key in body and body[key] != getattr(current, key):
                raise SubscriptionError(422, f"{key} can't be changed; only authorization can")
        event_types = body.get("event_types", current.event_types)
        if (
            not isinstance(event_types, list)
            or not all(isinstance(name, str) for name in event_types)
            or sorted(set(event_types)) != current.event_types
        ):
            raise SubscriptionError(422, "event_types can't be changed; only authorization can")
        authorization, annotations, labels = _described(body)
        if current.authorization and not authorization:
            raise SubscriptionError(422, AUTHORIZATION_KEPT)
        async with self.store.pool.connection() as conn:
            await conn.execute(
                "UPDATE broker_subscriptions SET authz = %s,"
                " annotations = coalesce(%s, annotations), labels = coalesce(%s, labels),"
                " updated_at = now() WHERE id = %s",
                (_jsonb(authorization), _jsonb(annotations), _jsonb(labels), subscription_id),
            )
        return True

    async def open_session(
        self,
        subscription: Subscription,
        stream_id: str,
        requested: Sequence[PartitionKey],
        commit_timeout: float,
    ) -> None:
        """Record a new stream's session and rebalance the partitions to include it.

        Refused, as Nakadi checks in this order, when ``requested`` names partitions that are
        not the subscription's (422); when it requests none and the partitions nobody requested
        directly all have a balanced stream already (409); when another stream requested one
        of them directly (409); while a reset runs (409).
        """
        async with locked(self.store, subscription.id) as (conn, row):
            if row is None:
                raise SubscriptionError(404, f"Subscription {subscription.id} does not exist")
            await self.initialise(conn, subscription)
            cur = await conn.execute(
                "SELECT event_type, partition FROM broker_subscription_partitions"
                " WHERE subscription_id = %s",
                (subscription.id,),
            )
            keys = {(e, p) for e, p in await cur.fetchall()}
            foreign = [key for key in requested if key not in keys]
            if foreign:
                raise SubscriptionError(
                    422,
                    "Wrong partitions specified - some partitions don't belong to subscription: "
                    + partition_names(foreign),
                )
            cur = await conn.execute(
                "SELECT requested FROM broker_subscription_sessions"
                " WHERE subscription_id = %s AND closed_at IS NULL AND alive_until > now()",
                (subscription.id,),
            )
            live = [{(e, int(p)) for e, p in r[0]} for r in await cur.fetchall()]
            taken = set().union(*live)
            balanced = sum(1 for asked in live if not asked)
            if not requested and balanced >= len(keys) - len(taken):
                raise SubscriptionError(
                    409,
                    f"No free slots for streaming available for subscription {subscription.id}."
                    f" Total slots: {len(keys)}",
                )
            clash = [key for key in requested if key in taken]
            if clash:
                raise SubscriptionError(
                    409,
                    "The following partitions are already requested by other stream(s) of this"
                    " subscription: " + partition_names(clash, ","),
                )
            if row["resetting"]:
                raise SubscriptionError(
                    409, "Resetting subscription cursors request is still in progress"
                )
            await conn.execute(
                "INSERT INTO broker_subscription_sessions"
                " (stream_id, subscription_id, requested, commit_timeout, alive_until)"
                " VALUES (%s, %s, %s, %s, now() + make_interval(secs => %s))",
                (
                    stream_id,
                    subscription.id,
                    json.dumps(sorted([e, str(p)] for e, p in requested)),
                    commit_timeout,
                    coordination.ALIVE_SECONDS,
                ),
            )
            await rebalance_partitions(conn, subscription.id)

    async def commit(
        self,
        subscription_id: str,
        stream_id: str,
        cursors: list[tuple[PartitionKey, int]],
        *,
        checked: Subscription | None = None,
    ) -> list[str]:
        """Each cursor's result, ``committed`` or ``outdated`` (not after the committed offset).

        The stream must own every partition it commits; a partition being handed over goes to
        its next stream once the commit reaches the offset the old stream was sent up to.
        ``checked``: the (remembered) subscription the caller authorized the commit against;
        :class:`SubscriptionChanged`, and nothing committed, if Postgres no longer holds it so.
        """
        # One statement (``sql/broker/006_commit_cursors.sql``): a consumer waits for every
        # commit, and each statement more is a round trip and its share of this process's CPU.
        event_types = [event_type for (event_type, _), _ in cursors]
        # Beyond Postgres's int no partition is numbered: such a cursor names none of ours.
        partitions = [
            partition if partition <= _LARGEST_INT else -1 for (_, partition), _ in cursors
        ]
        offsets = [offset for _, offset in cursors]
        async with self.store.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT refused, refused_at, results"
                " FROM broker_commit_cursors(%s, %s, %s::text[], %s::int[], %s::bigint[],"
                " %s, %s, %s)",
                (
                    subscription_id,
                    stream_id,
                    event_types,
                    partitions,
                    offsets,
                    checked is not None,
                    None
                    if checked is None or checked.authorization is None
                    else Jsonb(checked.authorization),
                    coordination.CHANNEL,
                ),
            )
            row = await cur.fetchone()
        assert row is not None
        refused, refused_at, results = row
        if refused is None:
            return list(results)
        if refused == "changed":
            raise SubscriptionChanged(subscription_id)
        if refused == "missing":
            raise SubscriptionError(404, f"Subscription {subscription_id} does not exist")
        if refused == "no_session":
            raise unknown_session(stream_id)
        (event_type, partition), _ = cursors[refused_at - 1]
        if refused == "not_in_subscription":
            raise SubscriptionError(
                422, f"partition {partition} of {event_type} is not part of the subscription"
            )
        raise SubscriptionError(
            422,
            f"Cursor for partition {partition} of {event_type} can't be committed: the"
            f" partition is not assigned to stream {stream_id}",
        )

    async def committed(self, subscription_id: str) -> list[tuple[str, int, int]]:
        """(event type, partition, committed Kafka offset) of every partition, in order."""
        async with self.store.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT event_type, partition, committed FROM broker_subscription_partitions"
                " WHERE subscription_id = %s ORDER BY event_type, partition",
                (subscription_id,),
            )
            return await cur.fetchall()

    async def reset(
        self,
        subscription: Subscription,
        positions: Mapping[PartitionKey, int],
        wait_seconds: float,
    ) -> list[str]:
        """Set the committed offsets, close the subscription's streams (they can no longer
        commit) and refuse new ones for ``wait_seconds`` or until :meth:`end_reset`.

        The ids of the streams closed.
        """
        async with locked(self.store, subscription.id) as (conn, row):
            if row is None:
                raise SubscriptionNotFound(subscription.id)
            if row["resetting"]:
                raise Conflict("Cursors reset is already in progress for the subscription")
            await self.initialise(conn, subscription)
            async with conn.cursor() as cur:
                await cur.executemany(
                    "UPDATE broker_subscription_partitions SET committed = %s"
                    " WHERE subscription_id = %s AND event_type = %s AND partition = %s",
                    [(pos, subscription.id, *key) for key, pos in positions.items()],
                )
            # Whatever the dead-letter queue had found out about the old positions is forgotten.
            await conn.execute(
                "UPDATE broker_subscription_partitions SET owner = NULL, next_owner = NULL,"
                " release_offset = NULL, release_deadline = NULL, failed_commits = 0,"
                " last_dead_letter_offset = NULL WHERE subscription_id = %s",
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
                (wait_seconds, subscription.id),
            )
            await conn.execute(*notify_sql(subscription.id))
        return closed

    async def end_reset(self, subscription_id: str) -> None:
        """New streams may open again."""
        async with self.store.pool.connection() as conn:
            await conn.execute(
                "UPDATE broker_subscriptions SET reset_until = NULL WHERE id = %s",
                (subscription_id,),
            )

    async def seconds_alive(self, stream_ids: list[Any]) -> float | None:
        """How long the longest-lived of the streams that have not ended may still run, or
        None when they all ended (or their processes are gone)."""
        async with self.store.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT extract(epoch FROM max(alive_until) - now())"
                " FROM broker_subscription_sessions"
                " WHERE stream_id = ANY(%s) AND NOT finished AND alive_until > now()",
                (stream_ids,),
            )
            row = await cur.fetchone()
        return None if row is None or row[0] is None else float(row[0])

    async def partition_rows(self, subscription_id: str) -> list[dict[str, Any]]:
        """Every partition's committed offset, owner, next owner, assignment type and whether
        its owner's stream is live."""
        async with self.store.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "SELECT p.event_type, p.partition, p.committed, p.owner::text,"
                " p.next_owner::text, p.assignment_type,"
                " coalesce(s.closed_at IS NULL AND s.alive_until > now(), false) AS live"
                " FROM broker_subscription_partitions p"
                " LEFT JOIN broker_subscription_sessions s ON s.stream_id = p.owner"
                " WHERE p.subscription_id = %s ORDER BY p.event_type, p.partition",
                (subscription_id,),
            )
            return await cur.fetchall()


def _described(body: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """The body's ``authorization``, ``annotations`` and ``labels``, checked (422)."""
    authorization = body.get("authorization")
    if authorization is not None:
        invalid = section_problem(authorization, ("admins", "readers"))
        if invalid is not None:
            raise SubscriptionError(422, invalid)
    broken = [problem for kind in KINDS for problem in annotations_problems(kind, body.get(kind))]
    broken += [f'Field "annotations" {p}' for p in dead_letters.problems(body.get("annotations"))]
    if broken:
        raise SubscriptionError(422, "\n".join(broken))
    return authorization, body.get("annotations"), body.get("labels")


def _jsonb(value: object) -> Jsonb | None:
    return None if value is None else Jsonb(value)


def partition_names(keys: Iterable[PartitionKey], separator: str = ", ") -> str:
    """Partitions as Nakadi names them in its problems (each of its problems has its own
    ``separator``)."""
    names = (f"EventTypePartition{{eventType='{e}', partition='{p}'}}" for e, p in keys)
    return separator.join(names)


def unknown_session(stream_id: str) -> SubscriptionError:
    return SubscriptionError(
        422, f"Session with stream id {stream_id} not found (it ended or never existed)"
    )


@contextlib.asynccontextmanager
async def locked(
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


async def rebalance_partitions(conn: psycopg.AsyncConnection[Any], subscription_id: str) -> None:
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
        async with locked(store, subscription_id) as (conn, row):
            if row is None:
                continue
            # Its process is gone: nobody can commit for it any more.
            await conn.execute(
                "UPDATE broker_subscription_sessions SET closed_at = alive_until,"
                " commit_deadline = alive_until, finished = true"
                " WHERE subscription_id = %s AND closed_at IS NULL AND alive_until < now()",
                (subscription_id,),
            )
            await rebalance_partitions(conn, subscription_id)
        log.warning(
            "subscription streams of a gone broker process closed",
            extra=logs.fields(subscription_id=subscription_id),
        )
