"""The bridge's event types: one per table, created on first sight, schema evolved on DDL.

The broker's own API does the creating and the compatibility check (``PUT`` answers 422 when
the mode refuses a change), so the bridge follows exactly the rules a person would; the broker
registers each schema version in the registry under the event type's subject (tenant
``changebroker``, namespace ``event-types``). Its events go through the broker's publishing
pipeline (:mod:`changebroker.broker.publishing.pipeline`), whose targets are kept here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from changebroker import kafka
from changebroker.bridge.tables import Table, canonical
from changebroker.broker.event_types import effective_schema
from changebroker.broker.event_types.store import Store
from changebroker.broker.publishing.pipeline import Target, Targets

OWNING_APPLICATION = "changebroker-bridge"
# What data_event_type declares; with the schema, all its effective schema depends on.
COMPATIBILITY_MODE = "forward"
CLEANUP_POLICY = "delete"


class SchemaRefused(Exception):
    """The broker refused a table's new schema (or event type); the message says why."""


@dataclass(frozen=True)
class OwnSchema:
    """What can make the bridge's event of a row invalid under the schema the bridge set.

    The rest is valid by construction: the envelope and metadata are the bridge's, and a
    value's JSON type follows its column's type just as the column's schema does
    (``values.to_json``, ``values.column_schema``; a row bringing types the schema lacks
    evolves it first). Nullability and the key come from the catalog as it was described,
    which can change under rows in flight (a column made nullable, a new primary key): they
    are checked per event, and an event that fails the check is validated in full, which
    says what is wrong. Validating every event in full cost ~11% of the bridge's CPU."""

    required: frozenset[str]  # the key: a row's event carries it
    not_null: frozenset[str]

    @classmethod
    def of(cls, schema: Mapping[str, Any], key: Iterable[str]) -> OwnSchema:
        not_null = set()
        for name, column in schema.get("properties", {}).items():
            types = column.get("type")
            if types is not None and "null" not in (types if isinstance(types, list) else [types]):
                not_null.add(name)
        return cls(frozenset(key), frozenset(not_null))

    def admits(self, data: Mapping[str, Any]) -> bool:
        """Whether an event of row ``data`` needs no validation."""
        if not self.required <= data.keys():
            return False
        if None in data.values():
            return not any(value is None and name in self.not_null for name, value in data.items())
        return True


@dataclass
class Published:
    """An event type the bridge publishes to, with the schema it last set; ``own`` when the
    event type's effective schema is the one the bridge declared (not changed by hand since,
    not under another mode or policy): its events are then checked, not validated."""

    target: Target
    schema: dict[str, Any]
    own: OwnSchema | None = None

    @classmethod
    def of(cls, target: Target, schema: dict[str, Any]) -> Published:
        declared = effective_schema.build("data", schema, COMPATIBILITY_MODE, CLEANUP_POLICY)
        own = (
            OwnSchema.of(schema, target.key_fields) if target.validator.schema == declared else None
        )
        return cls(target, schema, own)

    @property
    def ends_rows(self) -> bool:
        """Whether its schema admits a table event's ``{}`` (tables.json_schema)."""
        return "required" not in self.schema


def event_type_name(pattern: str, prefix: str, table: str) -> str:
    schema, _, name = table.partition(".")
    return pattern.format(prefix=prefix, schema=schema, table=name)


def data_event_type(name: str, table: Table, schema: dict[str, Any], partitions: int) -> Any:
    """The EventType body of a table: hash on the key, so a row's changes stay in order;
    without a key, one partition keeps every change of the table in order."""
    body: dict[str, Any] = {
        "name": name,
        "owning_application": OWNING_APPLICATION,
        "category": "data",
        "enrichment_strategies": ["metadata_enrichment"],
        "compatibility_mode": COMPATIBILITY_MODE,
        "cleanup_policy": CLEANUP_POLICY,
        "schema": {"type": "json_schema", "schema": json.dumps(schema)},
    }
    parallelism = partitions if table.key else 1
    body["default_statistic"] = {
        "messages_per_minute": 1000,
        "message_size": 1000,
        "read_parallelism": parallelism,
        "write_parallelism": parallelism,
    }
    if table.key:
        body["partition_strategy"] = "hash"
        body["partition_key_fields"] = list(table.key)
    else:
        body["partition_strategy"] = "random"
    return body


class EventTypes:
    def __init__(self, store: Store, broker: httpx.AsyncClient, cluster: kafka.Cluster) -> None:
        """``cluster``: the bridge's Kafka, where the storage ``default`` is."""
        self._store = store
        self._broker = broker
        self._targets = Targets(store, cluster)

    async def target(self, name: str) -> Target | None:
        """The publishing target of any event type (the outbox's), kept while its revision is."""
        return await self._targets.get(name)

    async def published(self, name: str) -> Published | None:
        """The event type as it is stored, with its schema; ``None`` when there is none."""
        target = await self.target(name)
        stored = await self._store.get(name) if target is not None else None
        if target is None or stored is None:
            return None
        return Published.of(target, json.loads(stored.body["schema"]["schema"]))

    async def ensure(
        self, name: str, table: Table, schema: dict[str, Any], partitions: int
    ) -> Published:
        """The table's event type with ``schema`` in force: created, or evolved to it."""
        created = await self._broker.post(
            "/event-types", json=data_event_type(name, table, schema, partitions)
        )
        if created.status_code not in (201, 409):
            raise SchemaRefused(f"creating event type {name}: {created.text}")
        stored = await self._store.get(name)
        if stored is None:
            raise SchemaRefused(f"event type {name} vanished while being created")
        current = json.loads(stored.body["schema"]["schema"])
        if canonical(current) != canonical(schema):
            body = {**stored.body, "schema": {"type": "json_schema", "schema": json.dumps(schema)}}
            updated = await self._broker.put(f"/event-types/{name}", json=body)
            if updated.status_code != 200:
                raise SchemaRefused(f"event type {name} refused the new schema: {_detail(updated)}")
        target = await self.target(name)
        if target is None:
            raise SchemaRefused(f"event type {name} vanished while being updated")
        return Published.of(target, schema)


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", response.text))
    except ValueError:
        return response.text
