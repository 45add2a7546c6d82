"""The publishing pipeline: what turns one event into a Kafka message of its event type.

One pipeline for every writer of events: the broker's ``POST /event-types/{name}/events``
(``api.py``) and the bridge (bridge/README.md), which sends the messages in Kafka
transactions of its own. :class:`Targets` keeps what publishing needs of each event type,
:func:`prepare` validates, partitions, enriches and encodes one event into a
:class:`~changebroker.broker.publishing.producer.Message`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from changebroker import kafka, logs
from changebroker.broker.avro.payloads import PayloadSchema
from changebroker.broker.avro.schemas import AvroSchemas
from changebroker.broker.event_types import effective_schema
from changebroker.broker.event_types.rules import AVRO_SCHEMA
from changebroker.broker.event_types.store import Revision, Store, StoredEventType
from changebroker.broker.publishing.enrichment import EnrichmentError, enrich
from changebroker.broker.publishing.partitioning import (
    Partitioner,
    PartitioningError,
    metadata_partitioner,
    partitioner,
)
from changebroker.broker.publishing.producer import Message
from changebroker.broker.timelines.storages import cluster_of
from changebroker.timestamps import utc_second

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


class ItemFailure(Exception):
    def __init__(self, step: str, detail: str) -> None:
        super().__init__(detail)
        self.step = step
        self.detail = detail


# What preparing a batch for one revision of its event type gives: the messages, or the first
# event refused (its index and why).
Prepared = tuple[list[Message], tuple[int, "ItemFailure"] | None]


class Targets:
    """The publishing target of each event type, kept per process: a revision check per
    lookup keeps it right across processes (and across a delete and re-create: the revision
    holds the new topic)."""

    def __init__(
        self,
        store: Store,
        own: kafka.Cluster,
        avro: AvroSchemas | None = None,
        on_grown: Callable[[Target], Awaitable[None]] | None = None,
    ) -> None:
        """``own``: this process's ``--kafka-bootstrap`` (the storage ``default``); ``avro``:
        the Avro schemas Avro events are checked against (without it a target has none);
        ``on_grown``: called with a target whose topic gained partitions, before it is used
        (a producer must learn them before it writes there)."""
        self.store = store
        self._own = own
        self._avro = avro
        self._on_grown = on_grown
        self._kept: dict[str, Target] = {}

    async def get(self, name: str, *, fresh: bool = False) -> Target | None:
        """The event type's target, ``None`` when there is none; ``fresh``: its revision
        asked of Postgres (a change's notification may still be on its way)."""
        revision = await self.store.revision(name, fresh=fresh)
        if revision is None:
            self._kept.pop(name, None)
            return None
        kept = self._kept.get(name)
        if kept is not None and kept.revision == revision:
            return kept
        stored = await self.store.get(name)
        if stored is None:
            return None
        avro = None
        if self._avro is not None and stored.body["schema"]["type"] == AVRO_SCHEMA:
            schemas = await self._avro.of(name, fresh=fresh)
            avro = schemas.versions if schemas is not None else None
        target = Target.of(stored, self._own, avro)
        grown = (
            kept is not None and kept.topic == target.topic and target.partitions > kept.partitions
        )
        if grown and self._on_grown is not None:
            await self._on_grown(target)
        self._kept[name] = target
        return target


def prepare_batch(target: Target, batch: list[tuple[Any, int]], received_at: str) -> Prepared:
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
    (the publisher sends the result; the bridge, in its own Kafka transactions). ``valid``:
    the caller built the event to the event type's schema and checked what could still differ
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


def received_now() -> str:
    """Now in UTC, to the millisecond, as Nakadi writes ``received_at``."""
    now = time.time()
    second = int(now)
    return f"{utc_second(second)}.{int((now - second) * 1000):03d}Z"
