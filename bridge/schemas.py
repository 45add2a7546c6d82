"""Each table's schema in force: the catalog described (with the operator's ``--key``), the
JSON Schema derived from it and the columns changes bring (``tables.py``), set on the
table's event type through the broker's API (``event_types.py``) on first sight and
whenever a change brings a column or type not seen before."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import psycopg

from changebroker import logs
from changebroker.bridge import tables
from changebroker.bridge.event_types import EventTypes, Published, SchemaRefused
from changebroker.bridge.units import TableGone, TableRefused, Units

log = logging.getLogger(__name__)


class Schemas:
    def __init__(
        self,
        keys: Mapping[str, tuple[str, ...]],
        partitions: int,
        units: Units,
        event_type_name: Callable[[str], str],
    ) -> None:
        """``keys``: ``--key``, table -> key columns; ``partitions``: a new event type's;
        ``event_type_name``: a table's event type (where an operator moved it)."""
        self._keys = keys
        self._partitions = partitions
        self._units = units
        self._event_type_name = event_type_name
        self.published: dict[str, Published] = {}  # table -> its event type as last set
        self._row_types: dict[str, dict[str, int]] = {}  # table -> column OIDs seen
        self.tables: dict[str, tables.Table] = {}  # as last described
        # The session's: the application database's catalog, the broker's event types.
        self.catalog: psycopg.AsyncConnection[Any] | None = None
        self.event_types: EventTypes | None = None

    def clear(self) -> None:
        """A session starts: every schema is read again as stored."""
        self.published.clear()
        self._row_types.clear()

    def forget(self, table: str) -> None:
        """The table dropped, or redefined: its schema is read again when next needed."""
        self.published.pop(table, None)
        self._row_types.pop(table, None)

    def end(self, table: str) -> None:
        """A dropped table: nothing of it stays."""
        self.forget(table)
        self.tables.pop(table, None)

    async def describe(self, table: str) -> tables.Table | None:
        """The table now, with the operator's ``--key``; ``None`` (and the table refused,
        logged once) when it has no key, or it no longer exists."""
        assert self.catalog is not None
        refused = self._units.refused
        described = await tables.describe(self.catalog, table, self._keys.get(table, ()))
        if described is None:
            return None
        reason = tables.refusal(described)
        if reason is not None:
            if refused.get(table) != reason:
                log.error("table refused", extra=logs.fields(table=table, reason=reason))
            refused[table] = reason
            return None
        refused.pop(table, None)
        self.tables[table] = described
        return described

    def in_force(self, table: str, row_types: dict[str, int]) -> Published | None:
        """The table's event type as last set, unless this row brings columns or types the
        bridge has not seen (``None``: :meth:`evolved` is needed)."""
        published = self.published.get(table)
        if published is not None and row_types.items() <= self._row_types.get(table, {}).items():
            return published
        return None

    async def evolved(self, table: str, row_types: dict[str, int]) -> Published:
        """The table's event type, its schema evolved first when this row brings columns or
        types the bridge has not seen."""
        in_force = self.in_force(table, row_types)
        if in_force is not None:
            return in_force
        known = self._row_types.get(table, {})
        assert self.catalog is not None and self.event_types is not None
        name = self._event_type_name(table)
        # As last set, or as stored (a restart, a table redefined): what it declared stays.
        published = self.published.get(table) or await self.event_types.published(name)
        described = await self.describe(table)
        if described is None and table in self._units.refused:
            raise TableRefused(self._units.refused[table])
        catalog = described is not None
        if described is None and published is None:
            raise TableGone(table)
        if described is None:
            # Dropped since: the change's own columns are all there is to go by.
            assert published is not None
            described = tables.Table(table, (), published.target.key_fields)
        previous = published.schema if published else None
        schema = tables.json_schema(described, row_types, previous, catalog)
        if published is None or tables.canonical(schema) != tables.canonical(published.schema):
            published = await self.event_types.ensure(name, described, schema, self._partitions)
            log.info(
                "table schema in force",
                extra=logs.fields(table=table, event_type=name, version=published.target.version),
            )
        self.published[table] = published
        self._row_types[table] = {**known, **row_types}
        return published

    async def stored(self, table: str) -> Published | None:
        """The table's event type as last set, else as stored; ``None`` when it has none."""
        assert self.event_types is not None
        return self.published.get(table) or await self.event_types.published(
            self._event_type_name(table)
        )

    async def retarget(self) -> None:
        """Read every event type in force again: a timeline switch gave it a new topic."""
        assert self.event_types is not None
        for table, published in list(self.published.items()):
            target = await self.event_types.target(published.target.name)
            if target is None:
                del self.published[table]
            else:
                self.published[table] = Published.of(target, published.schema)

    async def mark_dropped(self, table: str) -> None:
        """The event type stays, for its retention; its schema says the table was dropped."""
        assert self.event_types is not None
        name = self._event_type_name(table)
        published = await self.event_types.published(name)
        if published is None:
            return
        key = tables.Table(table, (), published.target.key_fields)
        schema = tables.dropped_schema(published.schema, table)
        try:
            await self.event_types.ensure(name, key, schema, self._partitions)
        except SchemaRefused as exc:
            log.warning(
                "dropped table's event type not marked",
                extra=logs.fields(table=table, error=str(exc)),
            )
