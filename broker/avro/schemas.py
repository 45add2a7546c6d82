"""Each event type's ``avro_schema`` versions, compiled once per revision of the event type.

Versions never change once stored, but a deleted event type created again starts its
versions anew, so what a process keeps is checked against the event type's revision (which
Postgres notifies every process of) before each use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from changebroker.broker.avro.payloads import PayloadSchema, compile_schema
from changebroker.broker.event_types.rules import AVRO_SCHEMA
from changebroker.broker.event_types.store import Revision, Store


@dataclass(frozen=True)
class EventSchemas:
    """One revision's Avro versions; ``latest`` is the newest, None when there is none."""

    revision: Revision
    versions: Mapping[str, PayloadSchema] = field(default_factory=dict)
    latest: PayloadSchema | None = None


class AvroSchemas:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._kept: dict[str, EventSchemas] = {}

    async def of(self, name: str, *, fresh: bool = False) -> EventSchemas | None:
        """The event type's Avro versions, None when it does not exist; ``fresh``: as Postgres
        has them now (a version added in another process may not have been notified yet)."""
        revision = await self._store.revision(name, fresh=fresh)
        if revision is None:
            self._kept.pop(name, None)
            return None
        kept = self._kept.get(name)
        if kept is not None and kept.revision == revision:
            return kept
        stored = await self._store.all_schemas(name, AVRO_SCHEMA)
        versions = {s["version"]: compile_schema(s["schema"], s["version"]) for s in stored}
        latest = versions[stored[0]["version"]] if stored else None
        kept = self._kept[name] = EventSchemas(revision, versions, latest)
        return kept
