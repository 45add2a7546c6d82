"""The bridge's event types: one per table, created on first sight, schema evolved on DDL.

The broker's own API does the creating and the compatibility check (``PUT`` answers 422 when
the mode refuses a change), so the bridge follows exactly the rules a person would; the broker
registers each schema version in the registry under the event type's subject (tenant
``changebroker``, namespace ``event-types``). The publishing pipeline's
:class:`~broker.publishing.api.Target` is then read from the broker's store.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from broker.bridge.tables import Table, canonical
from broker.event_types.store import Store
from broker.publishing.api import Target

OWNING_APPLICATION = "changebroker-bridge"


class SchemaRefused(Exception):
    """The broker refused a table's new schema (or event type); the message says why."""


@dataclass
class Published:
    """An event type the bridge publishes to, with the schema it last set."""

    target: Target
    schema: dict[str, Any]


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
        "compatibility_mode": "forward",
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
    def __init__(self, store: Store, broker: httpx.AsyncClient) -> None:
        self._store = store
        self._broker = broker
        self._targets: dict[str, Target] = {}

    async def target(self, name: str) -> Target | None:
        """The publishing target of any event type (the outbox's), kept while its revision is."""
        revision = await self._store.revision(name)
        if revision is None:
            return None
        cached = self._targets.get(name)
        if cached is None or cached.revision != revision:
            stored = await self._store.get(name)
            if stored is None:
                return None
            cached = self._targets[name] = Target.of(stored)
        return cached

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
        return Published(target, schema)


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", response.text))
    except ValueError:
        return response.text
