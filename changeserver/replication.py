"""The replication client: pgoutput over a ``replication="database"`` connection.

One thread reads the COPY_BOTH stream, decodes whole transactions, and writes
them to the change log in batches: it drains whatever the socket already holds
(many transactions under load, one when idle) and then makes that batch durable
in one SQLite transaction. Only then does it confirm the batch's end LSN to
Postgres, so a crash at any moment loses nothing; a restart streams from the
stored position and skips transactions whose commit LSN is already durable.
Before streaming, the DDL capture (``ddl.py``) is installed in the database.
"""

from __future__ import annotations

import contextlib
import logging
import select
import sqlite3
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import pq, sql

from changebroker import logs, pg
from changebroker.changeserver import changes, ddl, metrics
from changebroker.changeserver.changelog import ChangeLog, Commit
from changebroker.changeserver.pgoutput import Decoder, Record, Transaction

log = logging.getLogger(__name__)

_PG_EPOCH = 946_684_800  # 2000-01-01 in Unix seconds: the protocol's clock epoch
_BATCH_CHANGES = 20_000  # bounds memory and SQLite transaction size under a burst
# "can no longer get changes from replication slot": Postgres removed WAL the slot needed.
_SLOT_UNUSABLE = b"55000"
_STATUS_INTERVAL = 5.0  # seconds between unsolicited standby status updates
_SILENCE_LIMIT = 3 * _STATUS_INTERVAL  # seconds without a message before the stream is dead
# Fixed text output, whatever the server's defaults: the served values never drift.
SESSION_OPTIONS = "-c datestyle=ISO -c timezone=UTC -c extra_float_digits=3 -c bytea_output=hex"


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


class SlotLost(Exception):
    """The slot we streamed from is gone, or Postgres removed WAL it still needed: the changes
    between our confirmed position and now can no longer be streamed."""


def ensure_slot(
    dsn: str,
    slot: str,
    publication: str,
    tables: tuple[str, ...] = (),
    *,
    streamed_before: bool = False,
) -> None:
    """Create the publication, and the pgoutput slot unless we streamed from one before.

    The publication covers ``tables`` (``schema.table`` or ``table``), or all tables
    when none are given; an existing publication is used as it is. Raise ``SlotLost`` when
    the slot was dropped after we streamed from it, or invalidated (``max_slot_wal_keep_size``
    exceeded: ``wal_status`` is ``lost``). Checking and creating are one step: a slot dropped
    between a separate check and a create would be made anew at the current WAL position,
    and the changes in between skipped without a word.
    """
    with pg.connect(dsn, autocommit=True) as conn:
        ensure_publication(conn, publication, tables)
        row = conn.execute(
            "SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
        if row is not None and row[0] == "lost":
            raise SlotLost(
                f"replication slot {slot} was invalidated: Postgres removed WAL it needed"
            )
        if row is not None:
            return
        if streamed_before:
            raise SlotLost(f"replication slot {slot} was dropped")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        log.info("replication slot created", extra=logs.fields(slot=slot))


def ensure_publication(
    conn: psycopg.Connection[Any], publication: str, tables: tuple[str, ...] = ()
) -> None:
    """Create ``publication`` for ``tables`` (or all tables) unless it exists."""
    if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,)).fetchone():
        return
    covered = (
        sql.SQL("TABLE ") + sql.SQL(", ").join(sql.Identifier(*t.split(".", 1)) for t in tables)
        if tables
        else sql.SQL("ALL TABLES")
    )
    try:
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR {}").format(sql.Identifier(publication), covered)
        )
    except psycopg.errors.DuplicateObject:
        return  # a fleet's other server, starting at the same moment, made it first
    log.info("publication created", extra=logs.fields(publication=publication))


def slot_start(dsn: str, slot: str) -> int:
    """Where ``slot`` will start streaming: its confirmed flush LSN."""
    with pg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots"
            " WHERE slot_name = %s",
            (slot,),
        ).fetchone()
    if row is None or row[0] is None:
        raise RuntimeError(f"replication slot {slot} has no confirmed position")
    return int(row[0])


def drop_slot(dsn: str, slot: str, timeout: float = 30.0) -> None:
    """Drop ``slot`` once its walsender has gone (it lingers briefly after a disconnect)."""
    deadline = time.monotonic() + timeout
    with pg.connect(dsn, autocommit=True) as conn:
        while True:
            try:
                conn.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                    " WHERE slot_name = %s",
                    (slot,),
                )
                log.info("replication slot dropped", extra=logs.fields(slot=slot))
                return
            except psycopg.errors.ObjectInUse:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


class TxidWidener:
    """64-bit txids from pgoutput's 32-bit xids: the epoch nearest a known recent txid."""

    def __init__(self, reference: int) -> None:
        self.reference = reference

    def widen(self, xid: int) -> int:
        candidate = (self.reference & ~0xFFFFFFFF) | xid
        if candidate > self.reference + 2**31:
            candidate -= 2**32
        elif candidate < self.reference - 2**31:
            candidate += 2**32
        self.reference = max(self.reference, candidate)
        return candidate


class Replicator(threading.Thread):
    def __init__(
        self,
        dsn: str,
        slot: str,
        publication: str,
        changelog: ChangeLog,
        selector_column: str,
        on_durable: Callable[[set[str]], None],
        max_age: float | None = None,
        tables: tuple[str, ...] = (),
        on_slot_loss: str = "fail",
        group_commit: float = 0.0,
    ) -> None:
        super().__init__(name="replication", daemon=True)
        self.group_commit = group_commit  # seconds a flush may wait after the one before
        self.tables = tables
        self.on_slot_loss = on_slot_loss  # "fail": stop and say so; "recreate": new slot, gap
        self.slot_losses = 0
        self.last_slot_loss: str | None = None
        self.failure: str | None = None  # why replication stopped for good, if it did
        self.dsn = dsn
        self.slot = slot
        self.publication = publication
        self.changelog = changelog
        self.selector_column = selector_column
        self.on_durable = on_durable
        self.max_age = max_age
        self.streaming = threading.Event()
        self.stopping = threading.Event()
        self._next_purge = 0.0
        self._ddl_installed = False
        # For the metrics: the LSN confirmed to the server, and when the newest durable
        # transaction committed (Unix seconds; None before the first).
        self.confirmed_lsn = changelog.durable()[1]
        self.durable_commit_unix: float | None = None

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        backoff = 0.1
        # A lost slot being replaced: retried, like any step, until Postgres lets it finish
        # (the connection that creates the new slot can break too).
        lost: str | None = None
        while not self.stopping.is_set():
            try:
                if not self._ddl_installed:
                    # Before a new slot: the capture's own setup is not a change to stream. Once
                    # per process: refused (no superuser), it is logged, not retried.
                    with pg.connect(self.dsn, autocommit=True) as conn:
                        ensure_publication(conn, self.publication, self.tables)
                    ddl.install(self.dsn, self.publication)
                    self._ddl_installed = True
                if lost is not None:
                    self._recreate_slot(lost)
                    lost = None
                ensure_slot(
                    self.dsn,
                    self.slot,
                    self.publication,
                    self.tables,
                    streamed_before=self.changelog.slot_created(),
                )
                self.changelog.note_slot_created()
                self._stream()
                backoff = 0.1
            except SlotLost as loss:
                self.streaming.clear()
                if not self._slot_lost(str(loss)):
                    return
                lost = str(loss)
            except Exception as error:  # any failure: reconnect, the log keeps our place
                self.streaming.clear()
                # A full disk under the change log rolls the batch back whole; nothing is
                # confirmed to Postgres, so the batch streams again once space returns.
                full = isinstance(error, sqlite3.OperationalError) and "full" in str(error)
                log.log(
                    logging.ERROR if full else logging.WARNING,
                    "the change log's disk is full: ingest stops until space returns"
                    if full
                    else "replication interrupted, reconnecting",
                    extra=logs.fields(
                        error=str(error).strip(), backoff_s=backoff, path=self.changelog.path
                    ),
                )
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    def _slot_lost(self, reason: str) -> bool:
        """Apply the slot-loss policy; False when replication must stop for good, True when
        the slot is to be made again (``_recreate_slot``)."""
        self.slot_losses += 1
        self.last_slot_loss = reason
        metrics.slot_losses.labels(self.on_slot_loss).inc()
        if self.on_slot_loss != "recreate":
            self.failure = (
                f"{reason}; changes after the change log's last position cannot be streamed."
                " Restart with --on-slot-loss recreate to go on after a gap (consumers get"
                " SNAPSHOT_TOO_OLD), or restore the slot"
            )
            log.error("replication slot lost", extra=logs.fields(reason=self.failure))
            return False
        return True

    def _recreate_slot(self, reason: str) -> None:
        """A new slot, and the change log restarted after the gap. Run again whole after a
        failure: a slot made by a try that failed before the log was restarted is dropped
        again, so no slot newer than the log is ever streamed from without a gap declared."""
        with contextlib.suppress(psycopg.errors.UndefinedObject):
            drop_slot(self.dsn, self.slot)
        ensure_slot(self.dsn, self.slot, self.publication, self.tables)
        start = slot_start(self.dsn, self.slot)
        self.changelog.restart_after_gap(start)
        log.error(
            "replication slot lost and recreated: changes before it are gone, readers of older"
            " positions get SNAPSHOT_TOO_OLD",
            extra=logs.fields(reason=reason, restart=format_lsn(start)),
        )
        self.on_durable(set())  # long polls read again, and learn their position is too old

    def _stream(self) -> None:
        with pg.connect(self.dsn, autocommit=True) as conn:
            (next_txid,) = conn.execute(
                "SELECT txid_snapshot_xmax(txid_current_snapshot())"
            ).fetchone() or (0,)
        widener = TxidWidener(int(next_txid))
        durable_lsn, confirmed = self.changelog.durable()
        conn = psycopg.connect(
            self.dsn, autocommit=True, replication="database", options=SESSION_OPTIONS
        )
        # Closed, never left by ``with``: its exit would COMMIT into the COPY_BOTH stream.
        try:
            pgconn = conn.pgconn
            command = (
                f"START_REPLICATION SLOT {sql.Identifier(self.slot).as_string(conn)} LOGICAL"
                f" {format_lsn(confirmed)} (proto_version '1', publication_names"
                f" {sql.Literal(sql.Identifier(self.publication).as_string(conn)).as_string(conn)})"
            )
            result = pgconn.exec_(command.encode())
            if result.status != pq.ExecStatus.COPY_BOTH:
                message = pgconn.get_error_message()
                if result.error_field(pq.DiagnosticField.SQLSTATE) == _SLOT_UNUSABLE:
                    raise SlotLost(message.strip())
                raise RuntimeError(message)
            self.streaming.set()
            log.info("streaming", extra=logs.fields(slot=self.slot, start=format_lsn(confirmed)))
            stream = _Stream(self, pgconn, widener, durable_lsn, confirmed)
            stream.pump()
        finally:
            conn.close()


class _Stream:
    """One START_REPLICATION session's state: decoder, pending batch, confirmed LSN."""

    def __init__(
        self,
        owner: Replicator,
        pgconn: pq.abc.PGconn,
        widener: TxidWidener,
        durable_lsn: int,
        confirmed: int,
    ) -> None:
        self.owner = owner
        self.pgconn = pgconn
        self.durable_lsn = durable_lsn
        self.confirmed = confirmed
        self.decoder = Decoder(owner.selector_column, owner.changelog.relation_id, widener.widen)
        self.records: list[Record] = []
        self.commits: list[Commit] = []
        self.last_status = 0.0
        self.last_heard = time.monotonic()  # any message from Postgres, keepalives included
        self.flush_after = 0.0

    def pump(self) -> None:
        pgconn = self.pgconn
        while not self.owner.stopping.is_set():
            size, data = pgconn.get_copy_data(1)
            if size == 0:
                # libpq's buffer is empty, the socket's may not be: while catching up, keep the
                # batch growing (one fsync for many transactions) rather than flush per read.
                pgconn.consume_input()
                size, data = pgconn.get_copy_data(1)
            if size > 0:
                self.last_heard = time.monotonic()
                self._handle(bytes(data))
                if len(self.records) >= _BATCH_CHANGES:
                    self._flush()
                continue
            if size < 0:  # -1: the server ended the stream; -2: an error
                raise RuntimeError(pgconn.get_error_message() or "stream ended")
            # Nothing more has arrived: make the batch durable, then wait. Group commit: a
            # flush soon after the last one first waits out the rest of ``group_commit`` for
            # more transactions to share its fsync (many small ones, each its own flush,
            # made the change log's fsyncs and SQLite commits the server's main cost).
            wait = self.flush_after - time.monotonic()
            if self.commits and wait > 0:
                select.select([pgconn.socket], [], [], wait)
                pgconn.consume_input()
                continue
            self._flush()
            self._purge_when_due()
            if time.monotonic() - self.last_status > _STATUS_INTERVAL:
                self._send_status(reply=True)
            silent = time.monotonic() - self.last_heard
            if silent > _SILENCE_LIMIT:
                # Each status asks for a keepalive: silence this long is a dead path (a
                # black-holed network), not an idle server. Not streaming: reconnect.
                raise RuntimeError(f"no message from Postgres for {silent:.0f}s")
            select.select([pgconn.socket], [], [], 1.0)
            pgconn.consume_input()

    def _handle(self, data: bytes) -> None:
        kind = data[0:1]
        if kind == b"w":
            (data_start,) = struct.unpack_from("!Q", data, 1)
            transaction = self.decoder.decode(data[25:], data_start)
            if transaction is not None:
                self._add(transaction)
        elif kind == b"k":
            wal_end, _, reply = struct.unpack_from("!QqB", data, 1)
            # Idle (no transaction open or pending): nothing before wal_end is ours to keep,
            # so confirm it and let Postgres recycle WAL other databases and tables wrote.
            advanced = (
                self.decoder.current is None and not self.commits and wal_end > self.confirmed
            )
            if advanced:
                self.confirmed = self.owner.confirmed_lsn = wal_end
            if reply or advanced:
                self._send_status()

    def _add(self, transaction: Transaction) -> None:
        if transaction.commit_lsn <= self.durable_lsn:
            return  # already in the change log: streamed again after a restart
        self.records += transaction.records
        self.commits.append(
            Commit(
                transaction.commit_lsn,
                transaction.end_lsn,
                changes.unix_us(transaction.commit_time),
                len(transaction.records),
            )
        )

    def _flush(self) -> None:
        if not self.commits:
            return
        self.owner.changelog.write(self.records, self.commits)
        self.durable_lsn = self.commits[-1].lsn
        self.confirmed = self.owner.confirmed_lsn = max(self.confirmed, self.commits[-1].end_lsn)
        self.owner.durable_commit_unix = self.commits[-1].unix_us / 1_000_000
        metrics.transactions_ingested.inc(len(self.commits))
        metrics.changes_ingested.inc(len(self.records))
        metrics.bytes_ingested.inc(sum(len(record[4]) for record in self.records))
        selectors = {record[0] for record in self.records}
        self.records, self.commits = [], []
        self.flush_after = time.monotonic() + self.owner.group_commit
        self.owner.on_durable(selectors)
        self._send_status()

    def _purge_when_due(self) -> None:
        max_age = self.owner.max_age
        if not max_age or time.monotonic() < self.owner._next_purge:
            return
        self.owner._next_purge = time.monotonic() + min(max(max_age / 10, 1.0), 60.0)
        dropped = self.owner.changelog.purge(int((time.time() - max_age) * 1_000_000))
        if dropped:
            log.info("retention purge", extra=logs.fields(changes=dropped))

    def _send_status(self, reply: bool = False) -> None:
        now_us = int((time.time() - _PG_EPOCH) * 1_000_000)
        lsn = self.confirmed
        # replyRequested (the periodic ones): Postgres answers with a keepalive, our proof
        # that the path is alive when no change comes.
        message = b"r" + struct.pack("!QQQqB", lsn, lsn, lsn, now_us, int(reply))
        if self.pgconn.put_copy_data(message) != 1 or self.pgconn.flush() != 0:
            raise RuntimeError("could not send standby status")
        self.last_status = time.monotonic()
