"""What a TRUNCATE, DROP, CREATE or REDEFINE of a table (the changeserver's table events)
does to the table's unit: its table events (``table_events.py``), its schema, its snapshot
runs, its end."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from changebroker import logs
from changebroker.bridge import tables
from changebroker.bridge.data_events import eid, occurred_at
from changebroker.bridge.event_types import SchemaRefused
from changebroker.bridge.position import Position, Progress
from changebroker.bridge.schemas import Schemas
from changebroker.bridge.snapshot_runs import SnapshotRuns, new_run, now_rfc3339
from changebroker.bridge.table_events import ended_rows
from changebroker.bridge.units import TableGone, TableRefused, Units, UnitStopped
from changebroker.broker.publishing.producer import Message
from changebroker.changeserver.ddl import CREATE, DROP, REDEFINE, TRUNCATE
from changebroker.changeserver.sequence import Sequence

log = logging.getLogger(__name__)


class TableChanges:
    def __init__(
        self, selection: tables.Selection, units: Units, schemas: Schemas, runs: SnapshotRuns
    ) -> None:
        self._selection = selection
        self._units = units
        self._schemas = schemas
        self._runs = runs

    async def events(
        self, change: Mapping[str, Any], position: Position, rewound: bool, received_at: str
    ) -> list[Message]:
        """A TRUNCATE, DROP, CREATE or REDEFINE of a table (the changeserver's table events):

        * TRUNCATE: a table event in every partition ends every earlier row; a snapshot run
          under way is done (the rows it had not read are gone, later ones are changes);
        * DROP: the same, the event type's schema marked as ended, and the unit ends: its
          progress, run and state are forgotten (a dropped table's name is no unit);
        * CREATE: a new table, every row of which comes through the stream: no snapshot;
        * REDEFINE: earlier events no longer describe the rows (a column renamed, a default
          filled in, a retype...): the schema follows the catalog, and a new snapshot run
          publishes every row again, each ``S`` event replacing the row.

        Pending chunks of the table are dropped in each case: read before, they may describe
        rows as they no longer are."""
        table, operation = change["table"], change["operation"]
        if not self._selection(table) or table in self._units.stopped:
            return []
        if rewound and Sequence.parse(change["sequence"]) <= position.floor(table):
            return []
        self._runs.chunks.discard(table)
        self._runs.requests.pop(table, None)
        self._units.gone.discard(table)
        if operation in (CREATE, DROP) and self._runs.discovery is not None:
            # The catalog the pending discovery read may have shown the table this drops (a
            # run for it would read the next table of the name, whose CREATE comes through
            # the stream), or the one this creates: either way the stream tells the rest.
            with contextlib.suppress(ValueError):
                self._runs.discovery[1].remove(table)
        log.info(
            "table event",
            extra=logs.fields(table=table, operation=operation, detail=change.get("detail", "")),
        )
        if operation == CREATE:
            # Refused now (no key): its changes are not published, so it is not complete
            # from the stream; once it has a key, it is snapshotted. Gone again: it was.
            await self._schemas.describe(table)
            if table not in self._units.refused:
                run = new_run(created=change["sequence"])
                run.finished_at = run.started_at
                position.snapshots[table] = run
            return []
        if operation == REDEFINE:
            await self._redefined(table, change, position)
            return []
        if table in self._units.refused:
            if operation == DROP:
                self._end_unit(table, position)
            return []  # never published: no rows to end
        try:
            messages = await self._ended_rows(table, change, position, received_at)
        except UnitStopped as exc:
            self._units.stop(table, str(exc), Sequence.parse(change["sequence"]), position)
            return []
        if operation == DROP:
            await self._schemas.mark_dropped(table)
            self._end_unit(table, position)
        elif operation == TRUNCATE:
            running = position.snapshots.get(table)
            if running is not None and running.finished_at is None:
                running.finished_at = now_rfc3339()
                log.info(
                    "snapshot finished: the table was truncated", extra=logs.fields(table=table)
                )
        return messages

    async def _ended_rows(
        self, table: str, change: Mapping[str, Any], position: Position, received_at: str
    ) -> list[Message]:
        """The table events that end every earlier row of ``table``, one per partition (none
        when the table never had an event type)."""
        published = await self._schemas.stored(table)
        if published is None:
            return []
        if not published.ends_rows:
            raise UnitStopped(
                f"event type {published.target.name} was created before table events: its"
                " schema requires the key in every event, so a TRUNCATE or DROP TABLE cannot"
                " be told to its consumers. Move the table to a new event type"
                ' (POST /units/<table>/resume with {"event_type": ...})'
            )
        sequence = change["sequence"]
        eids = [
            eid(f"{table}/{sequence}/partition/{p}") for p in range(published.target.partitions)
        ]
        flow_id = "truncate" if change["operation"] == TRUNCATE else "drop"
        messages = ended_rows(published, table, eids, flow_id, occurred_at(change), received_at)
        progress = position.progress.setdefault(table, Progress())
        progress.event_type = published.target.name
        progress.sequence = sequence
        progress.events += len(messages)
        progress.commit_time = change["timestamp"]
        return messages

    async def _redefined(self, table: str, change: Mapping[str, Any], position: Position) -> None:
        """The schema follows the catalog now (renamed and dropped columns marked, added ones
        declared), and a new run publishes every row again."""
        self._schemas.forget(table)
        described = await self._schemas.describe(table)
        if described is None:
            return  # refused, or gone again: its DROP follows
        try:
            await self._schemas.evolved(table, {})
        except TableGone:
            return
        except (SchemaRefused, TableRefused) as exc:
            self._units.stop(table, str(exc), Sequence.parse(change["sequence"]), position)
            return
        self._runs.requests[table] = new_run()

    def _end_unit(self, table: str, position: Position) -> None:
        """A dropped table is no unit any more: nothing of it stays in the position record,
        ``/status`` or memory (a table of the same name later is a new unit)."""
        position.forget(table)
        self._units.end(table)
        self._schemas.end(table)
        self._runs.end(table)
