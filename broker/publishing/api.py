"""``POST /event-types/{name}/events``: validate, partition, enrich, write to Kafka.

As Nakadi: the first event that fails validation, partitioning or enrichment
fails the batch and nothing is written (422; that item ``failed`` with its
step, the others ``aborted``); when Kafka refuses some events the answer is
207 with each item's status; 200 when every event is stored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from changebroker import kafka, logs
from changebroker.auth import principal_of
from changebroker.broker import bodies, consumer_tags, metrics
from changebroker.broker.access import Access
from changebroker.broker.avro.payloads import PayloadSchema
from changebroker.broker.avro.schemas import AvroSchemas
from changebroker.broker.bodies import BadBody
from changebroker.broker.errors import EventTypeNotFound, Unavailable, Unprocessable
from changebroker.broker.event_types import effective_schema
from changebroker.broker.event_types.rules import AVRO_SCHEMA
from changebroker.broker.event_types.store import Revision, Store, StoredEventType
from changebroker.broker.own_events.collector import OwnEvents
from changebroker.broker.publishing import binary
from changebroker.broker.publishing.enrichment import EnrichmentError, enrich
from changebroker.broker.publishing.partitioning import (
    Partitioner,
    PartitioningError,
    metadata_partitioner,
    partitioner,
)
from changebroker.broker.publishing.producer import Delivery, Message
from changebroker.broker.timelines.clusters import Clusters
from changebroker.broker.timelines.storages import cluster_of
from changebroker.broker.timelines.writers import Writer
from changebroker.http import OneWriteResponse
from changebroker.metrics import labelled
from changebroker.timestamps import utc_second

log = logging.getLogger(__name__)

# "The maximum size per Event is 999,000 bytes" (docs/specs/nakadi-event-bus-api-0.10.1.yaml),
# measured as sent.
MAX_EVENT_BYTES = 999_000


@dataclass(frozen=True)
class Target:
    """What publishing needs of one event type revision, the validator compiled once."""

    name: str
    revision: Revision
    topic: str  # the active timeline's, on ``cluster``
    cluster: kafka.Cluster
    partitions: int
    category: str
    partition_strategy: str
    key_fields: tuple[str, ...]
    enriched: bool
    compacted: bool
    version: str  # of the json_schema JSON events are validated against
    validator: effective_schema.EventValidator | NoJsonSchema
    # The event type's authorization section (its writers publish), None when it has none.
    authorization: Mapping[str, Any] | None = None
    # Its avro_schema versions, which Avro events name.
    avro: Mapping[str, PayloadSchema] = dataclasses.field(default_factory=dict)

    @functools.cached_property
    def partition(self) -> Partitioner:
        """Derived, not a field: ``dataclasses.replace`` of the strategy gets a new one."""
        return partitioner(self.partition_strategy, self.key_fields, self.category, self.partitions)

    @functools.cached_property
    def metadata_partition(self) -> Partitioner:
        """The partition of an Avro event, by its metadata record."""
        return metadata_partitioner(self.partition_strategy, self.partitions)

    @classmethod
    def of(
        cls,
        stored: StoredEventType,
        own: kafka.Cluster,
        avro: Mapping[str, PayloadSchema] | None = None,
    ) -> Target:
        """``own``: the cluster of this process's ``--kafka-bootstrap`` (the storage
        ``default``). JSON events are validated against the newest json_schema version, as
        Nakadi does once an event type moved to Avro; without one, every JSON event is
        refused."""
        body = stored.body
        validator: effective_schema.EventValidator | NoJsonSchema = NoJsonSchema(stored.name)
        version = stored.schema_version
        if stored.json_schema is not None:
            schema = effective_schema.build(
                body["category"],
                json.loads(stored.json_schema["schema"]),
                body["compatibility_mode"],
                body["cleanup_policy"],
            )
            validator = effective_schema.EventValidator(schema)
            version = stored.json_schema["version"]
        return cls(
            name=stored.name,
            revision=stored.stamp,
            topic=stored.topic,
            cluster=cluster_of(stored.kafka_configuration, own),
            partitions=stored.partitions,
            category=body["category"],
            partition_strategy=body["partition_strategy"],
            key_fields=tuple(body.get("partition_key_fields") or ()),
            enriched="metadata_enrichment" in body["enrichment_strategies"],
            compacted=effective_schema.compacted(body["cleanup_policy"]),
            version=version,
            validator=validator,
            authorization=body.get("authorization"),
            avro=avro or {},
        )


class NoJsonSchema:
    """The validator of an event type that has only Avro schemas: JSON events do not fit."""

    def __init__(self, name: str) -> None:
        self.detail = f"No json_schema found for event type: {name}"
        self.schema: Mapping[str, Any] | None = None

    def first_error(self, event: Any) -> str | None:
        return self.detail


class InternalPublishError(Exception):
    """Events the broker publishes itself were not stored; the message says why."""


class ItemFailure(Exception):
    def __init__(self, step: str, detail: str) -> None:
        super().__init__(detail)
        self.step = step
        self.detail = detail


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


# What preparing a batch for one revision of its event type gives: the messages, or the first
# event refused (its index and why).
Prepared = tuple[list[Message], tuple[int, "ItemFailure"] | None]
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
        # Per process; a revision check per request keeps it right across processes (and
        # across a delete and re-create: the revision holds the new topic).
        self._targets: dict[str, Target] = {}

    async def _current(self, name: str, kept: Target) -> Target:
        """The event type as the database has it now (``kept`` when unchanged); else
        EventTypeNotFound."""
        current = await self.target(name, fresh=True)
        if current is None:
            raise EventTypeNotFound(name)
        return kept if current.revision == kept.revision else current

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/event-types/{name}/events", self.publish, methods=["POST"]),
            Route("/event-types/{name}/deleted-events", self.delete, methods=["POST"]),
        ]

    async def target(self, name: str, *, fresh: bool = False) -> Target | None:
        revision = await self.store.revision(name, fresh=fresh)
        if revision is None:
            self._targets.pop(name, None)
            return None
        cached = self._targets.get(name)
        if cached is not None and cached.revision == revision:
            return cached
        stored = await self.store.get(name)
        if stored is None:
            return None
        avro = None
        if stored.body["schema"]["type"] == AVRO_SCHEMA:
            schemas = await self.avro.of(name, fresh=fresh)
            avro = schemas.versions if schemas is not None else None
        target = Target.of(stored, self.clusters.own, avro)
        if (
            cached is not None
            and cached.topic == target.topic
            and target.partitions > cached.partitions
        ):
            # Repartitioned: the producer must know the new partitions before it writes.
            await self.clusters.producer(target.cluster).learn(target.topic)
        self._targets[name] = target
        return target

    @contextlib.asynccontextmanager
    async def _writing(self, name: str) -> AsyncIterator[Target | None]:
        """The event type to write to, None when there is none. While a timeline switch has
        it, the write waits and then goes to the new topic (broker/timelines/writers.py); it is
        left once Kafka answered for every event."""
        waited = await self.writer.enter(name)
        try:
            yield await self.target(name, fresh=waited)
        finally:
            self.writer.leave(name)

    async def publish_internal(self, name: str, events: list[dict[str, Any]]) -> None:
        """Events the broker publishes itself (dead letters, its own event types): validated
        and enriched like any, without authorization; InternalPublishError unless all are
        stored."""
        async with self._internal(name) as target:
            messages, refused = _prepared(target, [(event, 0) for event in events], received_now())
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
            request, name, target, lambda t: _prepared(t, batch, received_at), tags
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


def _prepared(
    target: Target, batch: list[tuple[Any, int]], received_at: str
) -> tuple[list[Message], tuple[int, ItemFailure] | None]:
    """Every event of ``batch`` prepared, or the first refused one (its index and why)."""
    messages: list[Message] = []
    for index, (event, size) in enumerate(batch):
        try:
            messages.append(prepare(target, event, size, received_at))
        except ItemFailure as failure:
            return messages, (index, failure)
    return messages, None


def prepare(
    target: Target, event: Any, size: int, received_at: str, valid: bool = False
) -> Message:
    """One event validated, partitioned, enriched and encoded: the pipeline without Kafka
    (the bridge sends the result in its own Kafka transactions). ``valid``: the caller built
    the event to the event type's schema and checked what could still differ
    (``changebroker.bridge.event_types.OwnSchema``), so it is not validated again."""
    if size > MAX_EVENT_BYTES:
        raise ItemFailure(
            "validating",
            f"Event too large: {size} bytes, the limit is {MAX_EVENT_BYTES} bytes as sent",
        )
    if not isinstance(event, dict):
        raise ItemFailure("validating", "an event must be a JSON object")
    error = None if valid else target.validator.first_error(event)
    if error is not None:
        raise ItemFailure("validating", error)
    try:
        partition = target.partition(event)
    except PartitioningError as exc:
        raise ItemFailure("partitioning", str(exc)) from None
    if target.enriched:
        try:
            enrich(
                event,
                event_type=target.name,
                partition=partition,
                version=target.version,
                flow_id=logs.flow_id.get(),
                received_at=received_at,
            )
        except EnrichmentError as exc:
            raise ItemFailure("enriching", str(exc)) from None
    key = event["metadata"]["partition_compaction_key"].encode() if target.compacted else None
    try:
        # ~25x json.dumps on 1 KB events; compact, UTF-8 unescaped: the same JSON to readers.
        value = orjson.dumps(event)
    except orjson.JSONEncodeError:
        # Integers past 64 bits and lone surrogates, which JSON parsing accepts.
        value = json.dumps(event, separators=(",", ":")).encode()
    return Message(target.topic, partition, key, value)


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


def received_now() -> str:
    """Now in UTC, to the millisecond, as Nakadi writes ``received_at``."""
    now = time.time()
    second = int(now)
    return f"{utc_second(second)}.{int((now - second) * 1000):03d}Z"
