"""The loop: long-poll ``/changes``, turn each change into events through the broker's
publishing pipeline, commit the events and the new position in one Kafka transaction.

Tables by name: the bridge reads every change of the tables ``--include``/``--exclude``
select (the changeserver's ``table`` extension of ``/changes``), whatever their selector;
each selected table is first published as it is (a snapshot: ``snapshot_runs.py``), its
rows as ``S`` events woven into the stream, unless the stream brought its CREATE, and again
whenever an operator asks or an ALTER TABLE redefines its rows. A TRUNCATE or DROP TABLE is
a table event in every partition (``table_changes.py``); a DROP ends the table's unit.

Each job has its module, which the loop drives: ``session.py`` the connections of one
session, ``position.py`` the position record, ``units.py`` the units of progress and those
stopped, ``schemas.py`` each table's schema in force, ``snapshot_runs.py`` the snapshot
runs, ``data_events.py``, ``table_changes.py`` and ``outbox.py`` a change's events.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import re
import time
from collections.abc import Mapping
from typing import Any

import orjson

from changebroker import kafka, logs, pg
from changebroker.bridge import session, tables
from changebroker.bridge.changes_client import Answer, ChangesClient, ChangesUnreadable
from changebroker.bridge.commits import Commits
from changebroker.bridge.data_events import data_events
from changebroker.bridge.event_types import SchemaRefused, event_type_name
from changebroker.bridge.outbox import outbox_event
from changebroker.bridge.outbox import unit_of as outbox_unit
from changebroker.bridge.position import Position, Progress
from changebroker.bridge.schemas import Schemas
from changebroker.bridge.settings import Settings
from changebroker.bridge.snapshot_runs import SnapshotRuns, new_run
from changebroker.bridge.snapshots import WATERMARKS, Chunks
from changebroker.bridge.table_changes import TableChanges
from changebroker.bridge.units import (
    TableGone,
    TableRefused,
    Units,
    UnitStopped,
    check_writable,
)
from changebroker.broker.publishing.pipeline import ItemFailure, received_now
from changebroker.broker.publishing.producer import Message
from changebroker.broker.timelines.writers import Writer
from changebroker.changeserver.sequence import ZERO, Sequence

log = logging.getLogger(__name__)

_INSERT, _DELETE = 1, 3
_TURN_EVERY = 256  # changes converted between turns of the event loop


def own_tables(outbox_table: str) -> frozenset[str]:
    """The product's tables, never published as data events: every table its migrations
    create in the application's default schema, and the outbox (published on its own)."""
    created = {
        f"public.{name}"
        for component in pg.components()
        for _, path in pg.migrations(component)
        for name in re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", path.read_text())
    }
    return frozenset({*created, "public.changebroker_migrations", WATERMARKS, outbox_table})


async def _read_after(
    after: asyncio.Future[None] | None, changes: ChangesClient, params: list[tuple[str, str]]
) -> Answer:
    if after is not None:
        await asyncio.wait([after])  # its failure is the commits' to raise, not the read's
    return await changes.get(params)


def _code(answer: Answer) -> str | None:
    """The ``code`` of a changeserver error body, if it has one."""
    try:
        body = orjson.loads(answer.body)
    except orjson.JSONDecodeError:
        return None
    return body.get("code") if isinstance(body, dict) else None


class WriterLapsed(Exception):
    """The bridge could not renew its registration as a writer of events: a timeline switch
    may go by without it, so it writes nothing until its session starts again."""


class Bridge:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.position = Position()  # as processed: committed, or being committed
        self.committed = Position()  # as Kafka holds it: what status reports
        self.changeserver_last = ZERO
        self.ready = asyncio.Event()
        self._wake = asyncio.Event()
        # The next read, started while the current batch is processed and committed.
        self._prefetch: tuple[Sequence, asyncio.Future[Answer]] | None = None
        # A gap was reported: the next read asks for everything the changeserver holds.
        self._read_all = False
        # The cluster of --kafka-bootstrap: its transactions hold the events and the position.
        self._cluster = kafka.Cluster(settings.kafka_bootstrap)
        self._writer: Writer | None = None
        self.selection = tables.Selection(
            settings.include, settings.exclude, own_tables(settings.outbox_table)
        )
        self.units = Units()
        self.schemas = Schemas(
            settings.keys, settings.partitions, self.units, self._event_type_name
        )
        self.runs = SnapshotRuns(
            Chunks(settings.name, settings.app_dsn, settings.snapshot_chunk),
            settings.publication,
            self.selection,
            self.units,
            self.schemas,
            self._cluster,
        )
        self.table_changes = TableChanges(self.selection, self.units, self.schemas, self.runs)

    @property
    def stopped(self) -> dict[str, str]:
        """Unit -> why it stopped."""
        return self.units.stopped

    @property
    def refused(self) -> dict[str, str]:
        """Table -> why it is not published."""
        return self.units.refused

    # -- status -------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        last = self.changeserver_last
        units = {}
        position = self.committed
        every = {*position.progress, *self.units.stopped, *position.held, *position.snapshots}
        for unit in sorted({*every, *self.units.refused}):
            progress = position.progress.get(unit, Progress())
            floor = position.floor(unit)
            units[unit] = {
                **progress.as_json(),
                "position": str(floor),
                "lag_bytes": max(0, last.lsn - floor.lsn),
                "stopped": self.units.stopped.get(unit),
                "refused": self.units.refused.get(unit),
                "snapshot": self.runs.status(unit, position),
            }
        return {
            "name": self.settings.name,
            "ready": self.ready.is_set(),
            "position": str(position.since),
            "changeserver_last_sequence": str(last),
            "lag_bytes": max(0, last.lsn - position.since.lsn),
            "units": units,
        }

    async def request_snapshot(self, table: str) -> str:
        """Publish ``table`` again as ``S`` events (a new run, with new eids), beside its live
        changes; returns the run's id. ``LookupError``: not a table the bridge publishes."""
        if not self.selection(table):
            raise LookupError(f"{table} is not selected by --include/--exclude")
        if self.schemas.catalog is None:
            raise LookupError("the bridge is starting: ask again once /health answers")
        if await self.schemas.describe(table) is None:
            raise LookupError(self.units.refused.get(table) or f"{table} does not exist")
        run = self.runs.requests[table] = new_run()
        log.info("snapshot requested", extra=logs.fields(table=table, run=run.id))
        self._wake.set()
        return run.id

    def resume(self, unit: str, event_type: str | None = None) -> bool:
        """An operator acted on what stopped ``unit``: try its held changes again, into
        ``event_type`` when given (Nakadi's answer to a change the mode refuses: a new event
        type; it is committed with the next batch, so a restart keeps it).

        It takes effect before the next batch is read: a batch under way skips the unit's
        changes to its end, as the held position it commits says."""
        if not self.units.resume(unit, event_type):
            return False
        self._wake.set()
        return True

    def _apply_resumes(self) -> None:
        for unit in self.units.apply_resumes():
            self.schemas.published.pop(unit, None)

    # -- the loop -----------------------------------------------------------------------

    async def run(self) -> None:
        """Sessions until cancelled; a failed session (Kafka, HTTP, Postgres) starts over from
        the committed position with a fresh transactional producer."""
        while True:
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Kafka, HTTP and Postgres trouble, or a bug: either way the loop must not end
                # while /health says the process is fine; each attempt is logged.
                self.ready.clear()
                log.warning(
                    "bridge session failed; starting over from the committed position",
                    extra=logs.fields(error=f"{type(exc).__name__}: {exc}"),
                    exc_info=exc,
                )
                await asyncio.sleep(1)

    async def _session(self) -> None:
        async with session.opened(self.settings, self._cluster, self._on_committed) as opened:
            self.position = self.committed = Position.of(opened.record)
            self.units.clear()
            self.schemas.clear()
            self.runs.clear()
            self._writer = opened.writer
            await self.runs.chunks.open()
            try:
                self.schemas.catalog = opened.catalog
                self.schemas.event_types = opened.event_types
                log.info(
                    "bridge resuming",
                    extra=logs.fields(since=str(self.position.since), held=len(self.position.held)),
                )
                self.ready.set()
                while True:
                    await self._step(opened.changes, opened.commits)
            finally:
                if self._prefetch is not None:
                    self._prefetch[1].cancel()
                    self._prefetch = None
                self.schemas.catalog = self.schemas.event_types = None
                self._writer = None
                await self.runs.chunks.close()

    # -- the stream ---------------------------------------------------------------------

    def _read_from(self) -> Sequence:
        if self._read_all:
            return ZERO
        resumed = [
            seq for unit, seq in self.position.held.items() if unit not in self.units.stopped
        ]
        return min([self.position.since, *resumed])

    async def _step(self, changes: ChangesClient, commits: Commits[Position]) -> None:
        assert self._writer is not None
        if self._writer.pending.is_set():
            await self._pause(commits)
        self._apply_resumes()
        if time.monotonic() >= self.runs.next_discovery:
            await self.runs.discover(self.position)
        await self.runs.start_requested(self.position, functools.partial(self._commit_now, commits))
        await self.runs.read_chunks(self.position)
        since = self._read_from()
        self._wake.clear()
        poll = self._poll(changes, since)
        woken: asyncio.Future[Any] = asyncio.ensure_future(self._wake.wait())
        paused: asyncio.Future[Any] = asyncio.ensure_future(self._writer.pending.wait())
        try:
            while not (poll.done() or woken.done()):
                turn = commits.turn()
                waits = [poll, woken, paused] if turn is None else [poll, woken, paused, turn]
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if turn is not None and turn.done():
                    await commits.advance()
                if paused.done():
                    # Nothing is being prepared meanwhile: the read goes on, the writes wait.
                    await self._pause(commits)
                    paused = asyncio.ensure_future(self._writer.pending.wait())
        except BaseException:
            poll.cancel()  # the session ends: no read may outlive its client unheard
            raise
        finally:
            woken.cancel()
            paused.cancel()
        if not poll.done():
            # An operator resumed a unit while we waited: read again from its held position.
            poll.cancel()
            return
        answer = poll.result()
        if answer.status == 400 and _code(answer) == "SNAPSHOT_TOO_OLD":
            await self._after_gap(commits, since)
            return
        if answer.status != 200:
            said = answer.body[:500].decode(errors="replace")
            raise ChangesUnreadable(f"GET /changes answered {answer.status}: {said}")
        if not self._writer.alive():
            raise WriterLapsed("could not renew the bridge's registration as a writer in time")
        self._read_all = False
        body = answer.changes()
        last = Sequence.parse(body["lastSequence"])
        # More than one read's limit waits upstream: read on while this batch is turned into
        # events and committed. Caught up, the next read waits for this batch's transaction
        # (below).
        behind = len(body["changes"]) >= self.settings.limit
        if behind:
            self._prefetch = (last, self._poll(changes, last))
        self.changeserver_last = max(self.changeserver_last, last)
        position = self.position.copy()
        position.renamed.update(self.units.renames)
        messages: list[Message] = []
        received_at = received_now()
        # Read from before ``since`` (a resumed unit, or after a gap): only then may a change
        # be one that a unit published already, so only then is each change's sequence
        # parsed and compared.
        rewound = since < self.position.since
        for i, change in enumerate(body["changes"]):
            if i % _TURN_EVERY == _TURN_EVERY - 1:
                # Let the loop run: the read ahead is sent and its answer received meanwhile,
                # not after the batch (converting 10,000 changes takes ~0.3 s).
                await asyncio.sleep(0)
            if change["table"] == WATERMARKS:
                mark = self.runs.chunks.mark_of(change)
                if mark is None:
                    continue
                if self.runs.discovery is not None and self.runs.discovery[0] == mark:
                    self.runs.discovered(position)
                chunk = self.runs.chunks.watermark(mark)
                if chunk is not None:
                    messages += await self.runs.events(chunk, position, change, received_at)
                continue
            if change["operation"] > _DELETE:
                messages += await self.table_changes.events(change, position, rewound, received_at)
                continue
            published = await self._publish(change, position, rewound, received_at)
            if published is None:
                continue
            unit, event_type, produced = published
            messages.extend(produced)
            progress = position.own(unit)
            progress.event_type = event_type
            progress.sequence = change["sequence"]
            progress.events += len(produced)
            progress.commit_time = change["timestamp"]
        position.since = max(position.since, last)
        for unit, held in list(position.held.items()):
            if unit in self.units.stopped:
                continue
            position.held[unit] = max(held, last)
            if position.held[unit] >= position.since:
                del position.held[unit]
        if position != self.position:  # the fields' equality: as the records would compare
            await self._commit(commits, messages, position)
        if body["changes"] and not behind:
            # A read sent before this batch's transaction ends would bring what the next
            # transaction carries anyway, in smaller pieces: read once it ends, and one read,
            # one answer and one transaction carry many of the database's small transactions.
            self._prefetch = (last, self._poll(changes, last, after=commits.under_way()))

    async def _pause(self, commits: Commits[Position]) -> None:
        """A timeline switch asks every writer to pause: what was prepared is committed first,
        then the bridge waits for the switch and writes to the event types as they are now."""
        assert self._writer is not None
        await commits.drain()
        await self._writer.paused()
        await self.schemas.retarget()

    async def _after_gap(self, commits: Commits[Position], since: Sequence) -> None:
        """The changeserver no longer holds changes after ``since`` (its replication slot was
        lost and made again, or retention removed them): read on from the start of what it
        holds, and snapshot every table again, so the rows the gap hid are published as
        ``S`` events; the new runs are committed before any chunk is read.

        The position stays at ``since``: the read from the start skips every change up to
        it. A server of a fleet that did not lose them serves them again (the load balancer
        may send that read to any server), and they were published already."""
        log.error(
            "changes after our position are gone upstream: snapshotting every table again",
            extra=logs.fields(since=str(since), tables=len(self.position.snapshots)),
        )
        if self._prefetch is not None:  # a read after ``since``: too old as well
            self._prefetch[1].cancel()
            self._prefetch = None
        self.position = dataclasses.replace(self.position.copy(), held={})
        self._read_all = True
        for table in self.position.snapshots:
            self.runs.requests[table] = new_run()
        if self.runs.requests:
            await self.runs.start_requested(
                self.position, functools.partial(self._commit_now, commits)
            )
        else:
            await self._commit_now(commits, self.position)

    async def _commit(
        self, commits: Commits[Position], messages: list[Message], position: Position
    ) -> None:
        """Commit ``messages`` and ``position`` in a Kafka transaction after what came before;
        ``self.position`` is ``position`` from now on (a failed commit ends the session,
        which starts over from what Kafka holds)."""
        self.position = position
        await commits.add(messages, position.as_json(), position)

    async def _commit_now(self, commits: Commits[Position], position: Position) -> None:
        """``position``, with no events, committed and in Kafka before anything goes on."""
        await self._commit(commits, [], position)
        await commits.drain()

    def _on_committed(self, position: Position) -> None:
        self.committed = position
        self.units.committed(position)

    def _poll(
        self,
        changes: ChangesClient,
        since: Sequence,
        after: asyncio.Future[None] | None = None,
    ) -> asyncio.Future[Answer]:
        """The read of changes after ``since``: the one prefetched if it starts there. A new
        read is sent once ``after`` has ended (whatever its outcome)."""
        prefetched, self._prefetch = self._prefetch, None
        if prefetched is not None:
            if prefetched[0] == since:
                return prefetched[1]
            prefetched[1].cancel()  # a resumed unit moved the read back
        s = self.settings
        # Every change of these tables whatever its selector (the changeserver's extension).
        read = (*(s.include or ("*",)), s.outbox_table, WATERMARKS)
        params = [
            *(("table", pattern) for pattern in read),
            ("since", str(since)),
            ("limit", str(s.limit)),
            ("block", str(s.block)),
        ]
        return asyncio.ensure_future(_read_after(after, changes, params))

    async def _publish(
        self, change: Mapping[str, Any], position: Position, rewound: bool, received_at: str
    ) -> tuple[str, str, list[Message]] | None:
        """(unit, event type, messages) of one change; ``None`` when it publishes nothing."""
        table = change["table"]
        outbox = table == self.settings.outbox_table
        if not outbox and (
            not self.selection(table) or table in self.units.refused or table in self.units.gone
        ):
            return None
        if outbox:
            if change["operation"] != _INSERT:
                return None  # the outbox's deletes (and updates) publish nothing
            unit = outbox_unit(change)
        else:
            unit = table
        if unit in self.units.stopped:
            return None
        if rewound and Sequence.parse(change["sequence"]) <= position.floor(unit):
            return None
        if not outbox:
            self.runs.chunks.observe(change)
        try:
            if outbox:
                assert self.schemas.event_types is not None
                event_type, messages = await outbox_event(
                    change, self.schemas.event_types, self._cluster, received_at
                )
            else:
                event_type, messages = await self._data_events(change, received_at)
        except TableRefused:
            return None  # refused and logged by Schemas.describe; nothing of it is published
        except TableGone:
            # Not some changes of it and not others: none, until its DROP.
            self.units.gone.add(table)
            log.warning(
                "table dropped before any change of it was published: its changes are skipped"
                " until its DROP",
                extra=logs.fields(table=table),
            )
            return None
        except (UnitStopped, SchemaRefused, ItemFailure) as exc:
            reason = exc.detail if isinstance(exc, ItemFailure) else str(exc)
            self.units.stop(unit, reason, Sequence.parse(change["sequence"]), position)
            return None
        return unit, event_type, messages

    # -- data change events -------------------------------------------------------------

    async def _data_events(
        self, change: Mapping[str, Any], received_at: str
    ) -> tuple[str, list[Message]]:
        table = change["table"]
        row = change.get("newRow") or change.get("oldRow") or {}
        row_types = {n: c["type"] for n, c in row.items()}
        # Asked of every change: answered without a coroutine while the schema stands.
        published = self.schemas.in_force(table, row_types) or await self.schemas.evolved(
            table, row_types
        )
        check_writable(published.target, self._cluster)
        described = self.schemas.tables.get(table)
        return published.target.name, data_events(change, published, described, received_at)

    def _event_type_name(self, table: str) -> str:
        """The table's event type: where an operator moved it, else by ``--pattern``."""
        return self.units.renames.get(table) or self.position.renamed.get(
            table, event_type_name(self.settings.pattern, self.settings.prefix, table)
        )
