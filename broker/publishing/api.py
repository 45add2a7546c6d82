"""``POST /event-types/{name}/events``: validate, partition, enrich, write to Kafka.

Each event goes through the publishing pipeline (``pipeline.py``), as the bridge's do.

As Nakadi: the first event that fails validation, partitioning or enrichment
fails the batch and nothing is written (422; that item ``failed`` with its
step, the others ``aborted``); when Kafka refuses some events the answer is
207 with each item's status; 200 when every event is stored.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from changebroker import logs
from changebroker.auth import principal_of
from changebroker.broker import bodies, consumer_tags, metrics
from changebroker.broker.access import Access
from changebroker.broker.avro.schemas import AvroSchemas
from changebroker.broker.bodies import BadBody
from changebroker.broker.errors import EventTypeNotFound, Unavailable, Unprocessable
from changebroker.broker.event_types.store import Store
from changebroker.broker.own_events.collector import OwnEvents
from changebroker.broker.publishing import binary
from changebroker.broker.publishing.partitioning import PartitioningError
from changebroker.broker.publishing.pipeline import (
    MAX_EVENT_BYTES,
    ItemFailure,
    Prepared,
    Target,
    Targets,
    prepare_batch,
    received_now,
)
from changebroker.broker.publishing.producer import Delivery, Message
from changebroker.broker.timelines.clusters import Clusters
from changebroker.broker.timelines.writers import Writer
from changebroker.http import OneWriteResponse
from changebroker.metrics import labelled

log = logging.getLogger(__name__)


class InternalPublishError(Exception):
    """Events the broker publishes itself were not stored; the message says why."""


def split_batch(data: bytes) -> list[tuple[Any, int]]:
    """The events of a JSON array, each with its size in bytes as sent.

    Sizes matter only when the body could hold an event over the limit, so a
    smaller body is parsed in one call and each event gets the body's size.
    """
    if len(data) <= MAX_EVENT_BYTES:
        events = bodies.parse(data)
        if not isinstance(events, list):
            raise BadBody("the body must be a JSON array of events")
        return [(event, 0) for event in events]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadBody(f"the body is not UTF-8 JSON: {exc}") from None
    out: list[tuple[Any, int]] = []
    i = _skip_space(text, 0)
    if not text.startswith("[", i):
        raise BadBody("the body must be a JSON array of events")
    i = _skip_space(text, i + 1)
    if text.startswith("]", i):
        return out
    try:
        while True:
            event, end = bodies.DECODER.raw_decode(text, i)
            # A character is at most 4 UTF-8 bytes: only events that could be too big are encoded.
            chars = end - i
            size = chars if chars * 4 <= MAX_EVENT_BYTES else len(text[i:end].encode("utf-8"))
            out.append((event, size))
            i = _skip_space(text, end)
            if text.startswith(",", i):
                i = _skip_space(text, i + 1)
            elif text.startswith("]", i) and not text[i + 1 :].strip():
                return out
            else:
                raise ValueError(f"expected ',' or ']' at character {i}")
    except ValueError as exc:
        raise BadBody(f"the body is not a valid JSON array: {exc}") from None
    except RecursionError:
        raise BadBody("the body nests too deeply to read") from None


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _item(event: Any, status: str, step: str, detail: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"publishing_status": status, "step": step}
    metadata = event.get("metadata") if isinstance(event, Mapping) else None
    if isinstance(metadata, Mapping) and isinstance(metadata.get("eid"), str):
        item["eid"] = metadata["eid"]
    if detail is not None:
        item["detail"] = detail
    return item


# Nakadi's words for deleting from a type whose cleanup_policy is delete.
NOT_COMPACTED = "It is not allowed to delete events from non compacted event type"


class Publisher:
    def __init__(
        self,
        store: Store,
        clusters: Clusters,
        writer: Writer,
        access: Access,
        avro: AvroSchemas,
        own: OwnEvents,
    ) -> None:
        self.store = store
        self.clusters = clusters
        self.writer = writer
        self.access = access
        self.avro = avro
        self.own = own
        self.targets = Targets(store, clusters.own, avro, self._learn)

    async def _current(self, name: str, kept: Target) -> Target:
        """The event type as the database has it now (``kept`` when unchanged); else
        EventTypeNotFound."""
        current = await self.targets.get(name, fresh=True)
        if current is None:
            raise EventTypeNotFound(name)
        return kept if current.revision == kept.revision else current

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/event-types/{name}/events", self.publish, methods=["POST"]),
            Route("/event-types/{name}/deleted-events", self.delete, methods=["POST"]),
        ]

    async def _learn(self, target: Target) -> None:
        """Repartitioned: the producer must know the new partitions before it writes."""
        await self.clusters.producer(target.cluster).learn(target.topic)

    @contextlib.asynccontextmanager
    async def _writing(self, name: str) -> AsyncIterator[Target | None]:
        """The event type to write to, None when there is none. While a timeline switch has
        it, the write waits and then goes to the new topic (broker/timelines/writers.py); it is
        left once Kafka answered for every event."""
        waited = await self.writer.enter(name)
        try:
            yield await self.targets.get(name, fresh=waited)
        finally:
            self.writer.leave(name)

    async def publish_internal(self, name: str, events: list[dict[str, Any]]) -> None:
        """Events the broker publishes itself (dead letters, its own event types): validated
        and enriched like any, without authorization; InternalPublishError unless all are
        stored."""
        async with self._internal(name) as target:
            messages, refused = prepare_batch(
                target, [(event, 0) for event in events], received_now()
            )
            if refused is not None:
                raise InternalPublishError(f"{refused[1].step}: {refused[1].detail}")
            await self._send_internal(target, messages)

    async def publish_internal_records(self, name: str, records: list[binary.Record]) -> None:
        """Avro events the broker publishes itself (its KPI event types), as
        :meth:`publish_internal`."""
        async with self._internal(name) as target:
            received_ms = int(time.time() * 1000)
            try:
                messages = [
                    binary.message(target, r, delete=False, received_ms=received_ms, flow_id=None)
                    for r in records
                ]
            except binary.RecordFailure as exc:
                raise InternalPublishError(str(exc)) from None
            await self._send_internal(target, messages)

    @contextlib.asynccontextmanager
    async def _internal(self, name: str) -> AsyncIterator[Target]:
        try:
            async with self._writing(name) as target:
                if target is None:
                    raise InternalPublishError(f'EventType "{name}" does not exist.')
                yield target
        except Unavailable as exc:
            raise InternalPublishError(exc.detail) from None

    async def _send_internal(self, target: Target, messages: list[Message]) -> None:
        sent = await self.clusters.producer(target.cluster).send(messages)
        errors = [error for error in sent if error]
        if errors:
            raise InternalPublishError(f"Kafka refused {len(errors)} events: {errors[0]}")

    async def _writable(
        self, request: Request, write: Callable[[Request, str, Target], Awaitable[Response]]
    ) -> Response:
        """``write`` to the request's event type, once its writers' authorization passed."""
        name = request.path_params["name"]
        async with self._writing(name) as target:
            if target is None:
                raise EventTypeNotFound(name)
            await self.access.require_publish(principal_of(request), name, target.authorization)
            return await write(request, name, target)

    async def publish(self, request: Request) -> Response:
        return await self._writable(request, self._publish)

    async def _publish(self, request: Request, name: str, target: Target) -> Response:
        started = time.perf_counter()
        tags = consumer_tags.parse(request.headers.get(consumer_tags.HEADER))
        if binary.is_avro(request.scope["headers"]):
            body = await bodies.raw(request)
            records = binary.records(body)
            answer = await self._binary(
                request, name, target, records, started, delete=False, tags=tags
            )
            if answer.status_code == 200:
                self._published(request, name, len(records), started, len(body))
            return answer
        body = await bodies.raw(request)
        batch = split_batch(body)
        received_at = received_now()
        target, messages, refused, delivery = await self._deliver(
            request, name, target, lambda t: prepare_batch(t, batch, received_at), tags
        )
        if refused is not None:
            index, failure = refused
            labelled(metrics.batches, name, "422").inc()
            labelled(metrics.failures, failure.step).inc()
            metrics.publish_duration.observe(time.perf_counter() - started)
            return JSONResponse(_rejected(batch, index, failure), status_code=422)
        assert delivery is not None
        errors = _counted(name, messages, delivery, started)
        if any(errors):
            return JSONResponse(_partly_stored(batch, errors), status_code=207)
        self._published(request, name, len(batch), started, len(body))
        # One write for the answer most publishes get: a single event's is mostly this.
        return OneWriteResponse(status_code=200)

    def _published(
        self, request: Request, name: str, events: int, started: float, size: int
    ) -> None:
        """``nakadi.batch.published`` of a batch stored whole, as Nakadi counts it."""
        if self.own.enabled:
            seconds = time.perf_counter() - started
            self.own.batch_published(name, principal_of(request), events, seconds, size)

    async def delete(self, request: Request) -> Response:
        """Tombstones for the events' keys (``metadata.partition_compaction_key``) in their
        partitions, so that compaction removes every event of those keys; readers never see a
        tombstone. Only compacted event types (422 for others, as Nakadi)."""
        return await self._writable(request, self._delete)

    async def _delete(self, request: Request, name: str, target: Target) -> Response:
        started = time.perf_counter()
        if binary.is_avro(request.scope["headers"]):
            records = binary.records(await bodies.raw(request))
            if not target.compacted:
                raise Unprocessable(NOT_COMPACTED)
            return await self._binary(request, name, target, records, started, delete=True)
        batch = split_batch(await bodies.raw(request))
        if not target.compacted:
            detail = NOT_COMPACTED
            items = [_item(event, "aborted", "validating", detail) for event, _ in batch]
            return JSONResponse(items, status_code=422)
        target, _, refused, delivery = await self._deliver(
            request, name, target, lambda t: _tombstones(t, batch)
        )
        if refused is not None:
            index, failure = refused
            return JSONResponse(_rejected(batch, index, failure), status_code=422)
        assert delivery is not None
        errors = delivery.errors()
        if any(errors):
            return JSONResponse(_partly_stored(batch, errors), status_code=207)
        return Response(status_code=200)

    async def _binary(
        self,
        request: Request,
        name: str,
        target: Target,
        records: list[binary.Record],
        started: float,
        *,
        delete: bool,
        tags: consumer_tags.KafkaHeaders | None = None,
    ) -> Response:
        received_ms = int(time.time() * 1000)
        flow_id = logs.flow_id.get()

        def prepare(target: Target) -> Prepared:
            messages: list[Message] = []
            for index, record in enumerate(records):
                try:
                    messages.append(
                        binary.message(
                            target,
                            record,
                            delete=delete,
                            received_ms=received_ms,
                            flow_id=flow_id,
                        )
                    )
                except binary.RecordFailure as failure:
                    return messages, (index, ItemFailure("publishing", str(failure)))
            return messages, None

        target, messages, refused, delivery = await self._deliver(
            request, name, target, prepare, tags
        )
        if refused is not None:
            index, failure = refused
            return JSONResponse(binary.items(records, index, failure.detail), status_code=207)
        assert delivery is not None
        errors = delivery.errors() if delete else _counted(name, messages, delivery, started)
        if any(errors):
            return JSONResponse(binary.items(records, errors=errors), status_code=207)
        return Response(status_code=200)

    async def _deliver(
        self,
        request: Request,
        name: str,
        target: Target,
        prepare: Callable[[Target], Prepared],
        tags: consumer_tags.KafkaHeaders | None = None,
    ) -> tuple[Target, list[Message], tuple[int, ItemFailure] | None, Delivery | None]:
        """``prepare``'s messages written (each with the Kafka headers ``tags``) and answered
        by Kafka: the target they were prepared for, the messages, and the refusal or Kafka's
        answer."""
        principal = principal_of(request)
        messages, refused = prepare(target)
        if refused is not None:
            # Refused by what this process keeps: another process may have just changed the
            # event type, its notification still on the way. Ask the database before saying no.
            current = await self._current(name, target)
            if current is not target:
                await self.access.require_publish(principal, name, current.authorization)
                target = current
                messages, refused = prepare(target)
            if refused is not None:
                return target, messages, refused, None
        delivery = await self.clusters.producer(target.cluster).submit(messages, tags)
        if not await delivery.answered_or_late() or delivery.failed:
            # Late (producer.LATE_AFTER_S) or failed: the topic may be one another process
            # has just deleted with its event type, its notification still on the way (Kafka
            # would hold these events until its 30 s timeout). Only a new topic changes
            # anything: in the kept one, these events may be stored already.
            current = await self._current(name, target)
            if current.topic != target.topic:
                await self.access.require_publish(principal, name, current.authorization)
                target = current
                messages, refused = prepare(target)
                if refused is not None:
                    return target, messages, refused, None
                delivery = await self.clusters.producer(target.cluster).submit(messages, tags)
        await delivery.answered()
        return target, messages, None, delivery


def _counted(
    name: str, messages: Sequence[Message], delivery: Delivery, started: float
) -> list[str | None]:
    """Kafka's answer per message, counted in the publishing metrics."""
    errors = delivery.errors()
    metrics.publish_duration.observe(time.perf_counter() - started)
    metrics.batch_events.observe(len(messages))
    if any(errors):
        failed = sum(1 for e in errors if e)
        labelled(metrics.batches, name, "207").inc()
        labelled(metrics.failures, "publishing").inc(failed)
        stored = [m for m, error in zip(messages, errors, strict=True) if not error]
        log.warning("publishing partly failed", extra=logs.fields(event_type=name, failed=failed))
    else:
        labelled(metrics.batches, name, "200").inc()
        stored = list(messages)
    labelled(metrics.events, name).inc(len(stored))
    labelled(metrics.published_bytes, name).inc(sum(len(m.value or b"") for m in stored))
    return errors


def _tombstones(target: Target, batch: list[tuple[Any, int]]) -> Prepared:
    """A tombstone per event: its key and partition only (its content is not validated, as
    Nakadi does not)."""
    messages: list[Message] = []
    for index, (event, size) in enumerate(batch):
        try:
            if size > MAX_EVENT_BYTES:
                raise ItemFailure("validating", f"Event too large: {size} bytes")
            if not isinstance(event, dict):
                raise ItemFailure("validating", "an event must be a JSON object")
            metadata = event.get("metadata")
            key = metadata.get("partition_compaction_key") if isinstance(metadata, dict) else None
            if not isinstance(key, str) or not key:
                raise ItemFailure(
                    "validating", "metadata.partition_compaction_key is required to delete events"
                )
            try:
                partition = target.partition(event)
            except PartitioningError as exc:
                raise ItemFailure("partitioning", str(exc)) from None
        except ItemFailure as failure:
            return messages, (index, failure)
        messages.append(Message(target.topic, partition, key.encode(), None))
    return messages, None


def _partly_stored(batch: list[tuple[Any, int]], errors: list[str | None]) -> list[Any]:
    """Nakadi's 207 body: each item ``failed`` with Kafka's error, or ``submitted``."""
    return [
        _item(event, "failed", "publishing", error)
        if error
        else _item(event, "submitted", "publishing")
        for (event, _), error in zip(batch, errors, strict=True)
    ]


def _rejected(batch: list[tuple[Any, int]], failed: int, failure: ItemFailure) -> list[Any]:
    """Nakadi's 422 body: the failed item, those before it aborted where they got to, the rest
    aborted before any step."""
    items = []
    for index, (event, _) in enumerate(batch):
        if index == failed:
            items.append(_item(event, "failed", failure.step, failure.detail))
        elif index < failed:
            items.append(_item(event, "aborted", "enriching", "a later event failed"))
        else:
            items.append(_item(event, "aborted", "none", f"event {failed} of the batch failed"))
    return items
