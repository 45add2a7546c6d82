"""What the broker did, as events of Nakadi's own event types, collected off the request path.

A request only appends what it knows, unformatted, to a bounded queue (:meth:`OwnEvents.add`:
the function that makes the event's fields and its arguments); once a second, or as soon as
``BATCH_EVENTS`` wait, a background task makes them events (the KPI ones Avro envelopes, the
audit ones JSON) and publishes them, a batch per event type, through the
publishing pipeline without authorization. What cannot be published is logged and dropped:
nothing of a client's request waits for, or fails with, the broker's own events. When the
queue is full (Kafka away for long), further events are dropped and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from changebroker import logs
from changebroker.auth import Principal
from changebroker.broker import metrics
from changebroker.broker.avro.envelope import Record
from changebroker.broker.avro.metadata import FIELDS
from changebroker.broker.avro.schemas import AvroSchemas
from changebroker.broker.own_events import definitions
from changebroker.broker.streams.event_stream import Streamed

log = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0  # Nakadi's batch collection timeout
# At shutdown, what is queued gets this long to be published (the graceful stop is 10 s).
LAST_FLUSH_SECONDS = 5.0
# How often an open stream tells what it sent (nakadi.data.streamed), and once more at its end.
STREAMED_EVERY_SECONDS = 30.0
BATCH_EVENTS = 1000
MAX_QUEUED = 100_000

# Publishes the broker's own Avro records / JSON events to an event type.
RecordSink = Callable[[str, list[Record]], Awaitable[None]]
EventSink = Callable[[str, list[dict[str, Any]]], Awaitable[None]]


class OwnEvents:
    """The broker's own events of one app; ``enabled`` False makes every method a no-op."""

    def __init__(self, enabled: bool, salt: str) -> None:
        self.enabled = enabled
        self._salt = salt.encode()
        # (event type, what makes its fields, their arguments, flow id, moment in ms).
        self._queue: deque[tuple[str, Callable[..., Any], tuple[Any, ...], str | None, int]] = (
            deque()
        )
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._records: RecordSink | None = None
        self._events: EventSink | None = None
        self._avro: AvroSchemas | None = None
        self._hashes: dict[str, str] = {}

    # -- what the broker did -------------------------------------------------------------

    def add(self, event_type: str, build: Callable[..., Any], *args: Any) -> None:
        """One event of ``event_type``, published within ``FLUSH_SECONDS``: ``build(*args)``
        makes its KPI fields (or the whole JSON event, for the audit log) in the background."""
        if not self.enabled:
            return
        if len(self._queue) >= MAX_QUEUED:
            metrics.own_events_dropped.inc()
            return
        moment = int(time.time() * 1000)
        self._queue.append((event_type, build, args, logs.flow_id.get(), moment))
        if len(self._queue) >= BATCH_EVENTS:
            self._wake.set()

    def hashed(self, app: str) -> str:
        """Nakadi's ``app_hashed``: SHA-256 of the salt and the name, in hex."""
        found = self._hashes.get(app)
        if found is None:
            if len(self._hashes) > 10_000:
                self._hashes.clear()
            found = self._hashes[app] = hashlib.sha256(self._salt + app.encode()).hexdigest()
        return found

    def event_type_log(self, body: Mapping[str, Any], status: str) -> None:
        self.add(definitions.EVENT_TYPE_LOG, _event_type_log, body, status)

    def subscription_log(self, subscription_id: str, status: str) -> None:
        self.add(definitions.SUBSCRIPTION_LOG, _subscription_log, subscription_id, status)

    def batch_published(
        self, event_type: str, principal: Principal, events: int, seconds: float, size: int
    ) -> None:
        self.add(
            definitions.BATCH_PUBLISHED,
            self._batch_published,
            event_type,
            principal,
            events,
            seconds,
            size,
        )

    def _batch_published(
        self, event_type: str, principal: Principal, events: int, seconds: float, size: int
    ) -> dict[str, Any]:
        return {
            "event_type": event_type,
            "app": principal.sub,
            "app_hashed": self.hashed(principal.sub),
            "token_realm": principal.type,
            "number_of_events": events,
            "ms_spent": int(seconds * 1000),
            "batch_size": size,
        }

    def data_streamed(
        self,
        lines: AsyncIterator[bytes],
        counts: Streamed,
        principal: Principal,
        subscription: str | None = None,
    ) -> AsyncIterator[bytes]:
        """``lines`` of a stream, what it sent told every ``STREAMED_EVERY_SECONDS`` and at
        its end, per event type (``counts``: what its batcher counts)."""
        if not self.enabled:
            return lines

        def told() -> None:
            for event_type, (events, size, batches) in counts.items():
                fields = {
                    "api": "lola" if subscription is None else "hila",
                    "subscription": subscription,
                    "event_type": event_type,
                    "app": principal.sub,
                    "app_hashed": self.hashed(principal.sub),
                    "token_realm": principal.type,
                    "number_of_events": events,
                    "bytes_streamed": size,
                    "batches_streamed": batches,
                }
                self.add(definitions.DATA_STREAMED, dict, fields)
            counts.clear()

        async def counted() -> AsyncIterator[bytes]:
            due = time.monotonic() + STREAMED_EVERY_SECONDS
            try:
                async for chunk in lines:
                    yield chunk
                    if time.monotonic() >= due:
                        told()
                        due = time.monotonic() + STREAMED_EVERY_SECONDS
            finally:
                told()

        return counted()

    # -- publishing ----------------------------------------------------------------------

    def start(self, records: RecordSink, events: EventSink, avro: AvroSchemas) -> None:
        if not self.enabled:
            return
        self._records, self._events, self._avro = records, events, avro
        self._task = asyncio.get_running_loop().create_task(self._run(), name="own-events")

    async def stop(self) -> None:
        """Publishes what is queued, then stops."""
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        try:
            await asyncio.wait_for(self.flush(), LAST_FLUSH_SECONDS)
        except TimeoutError:
            log.warning(
                "the broker's own events queued at shutdown were not all published",
                extra=logs.fields(dropped=len(self._queue)),
            )

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), FLUSH_SECONDS)
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        """Publish everything queued, a batch per event type."""
        while self._queue:
            batches: dict[str, list[tuple[Any, str | None, int]]] = {}
            for _ in range(min(len(self._queue), BATCH_EVENTS)):
                name, build, args, flow_id, moment = self._queue.popleft()
                batches.setdefault(name, []).append((build(*args), flow_id, moment))
            for name, batch in batches.items():
                try:
                    await self._publish(name, batch)
                except Exception as exc:
                    log.warning(
                        "the broker's own events were not published",
                        extra=logs.fields(event_type=name, events=len(batch), error=str(exc)),
                    )

    async def _publish(self, name: str, batch: list[tuple[Any, str | None, int]]) -> None:
        assert self._records is not None and self._events is not None and self._avro is not None
        if name not in definitions.KPI_SCHEMAS:
            await self._events(name, [fields for fields, _, _ in batch])
            return
        schemas = await self._avro.of(name)
        if schemas is None or schemas.latest is None:
            raise LookupError(f"{name} does not exist or has no avro_schema")
        schema = schemas.latest
        records = []
        for fields, flow_id, moment in batch:
            metadata: dict[str, Any] = dict.fromkeys(FIELDS)
            metadata.update(
                occurred_at=moment,
                eid=str(uuid.uuid4()),
                event_type=name,
                version=schema.version,
                flow_id=flow_id,
            )
            records.append(Record(metadata, schema.encode(fields)))
        await self._records(name, records)


def _event_type_log(body: Mapping[str, Any], status: str) -> dict[str, Any]:
    return {
        "event_type": body["name"],
        "status": status,
        "category": str(body["category"]).upper(),
        "authz": "enabled" if body.get("authorization") else "disabled",
        "compatibility_mode": str(body["compatibility_mode"]).upper(),
    }


def _subscription_log(subscription_id: str, status: str) -> dict[str, Any]:
    return {"subscription_id": subscription_id, "status": status}
