"""Decoding of the built-in ``pgoutput`` plugin's messages (protocol version 1).

The change log stores each change as its pgoutput message behind a small header
(``BODY``: change LSN, commit time, the change log's id for the relation), not
as decoded rows: ingest reads only what it must (the selector column) and the
rows are decoded when served, by the same code from the same bytes, so what is
served is what decoding at ingest would have given.

Tuple data arrives in text form. A column marked ``u`` (an unchanged TOASTed
value Postgres did not send) takes its value from the old row when the old row
is a whole one (``O``: REPLICA IDENTITY FULL); otherwise, a key-only old row
(``K``, whose other columns are NULL) or none, the column is left out of the
row: a consumer sees "not sent", never a wrong value.

A TRUNCATE, and the DDL ``changebroker_ddl`` brings into the stream (``ddl.py``), become
table events: one record per table (operation ``TRUNCATE``, ``DROP``, ``CREATE`` or
``REDEFINE``, a ``*`` message of our own behind ``BODY``), at the place of the message that
brought it, under a selector no request can name (``RESET_EVERY`` and the others below).
Transicator's change list has no such operation: its readers are told through
``SNAPSHOT_TOO_OLD`` (``api.py``); the ``table`` extension serves them as changes.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from changebroker import logs
from changebroker.changeserver import ddl
from changebroker.changeserver.ddl import CREATE, TRUNCATE

log = logging.getLogger(__name__)

INSERT, UPDATE, DELETE = 1, 2, 3
_INT16, _INT32 = struct.Struct("!h"), struct.Struct("!i")
_UINT32 = struct.Struct("!I")
_INSERT, _UPDATE, _DELETE, _FULL_OLD = 0x49, 0x55, 0x44, 0x4F  # 'I', 'U', 'D', 'O'
_TEXT, _NULL, _UNCHANGED = 0x74, 0x6E, 0x75  # 't', 'n', 'u'
# A stored table event: '*', its operation, the detail's UTF-8 (ours, not pgoutput's).
TABLE_EVENT = 0x2A

# A stored change: this header, then the pgoutput message (from its kind byte).
BODY = struct.Struct("!QqI")  # change LSN, commit time (µs since 2000-01-01), relation id

# (name, text value or None, type OID) in column order.
Column = tuple[str, str | None, int]
Row = list[Column]
# One change as the change log stores it: (selector, commit LSN, index in its transaction,
# 64-bit txid, body). A plain tuple: one is built per change on the ingest path, and
# executemany takes it as is.
Record = tuple[str, int, int, int, bytes]
# The selector of a row whose selector column is NULL, empty or missing: served to requests
# that name no selector.
NO_SELECTOR = ""
# The selectors table events are stored under; a request cannot name them (selectors match
# ^[0-9a-z_-]+$). After a TRUNCATE, DROP or REDEFINE rows any selector held may be gone or
# read otherwise (the table has the selector column: ``RESET_EVERY``), or only rows without
# a selector (``RESET_UNSELECTED``); a CREATE concerns no row anyone holds (``NO_RESET``).
RESET_EVERY = "!reset"
RESET_UNSELECTED = "!reset-unselected"
NO_RESET = "!table"


@dataclass(frozen=True)
class Relation:
    table: str  # schema.table
    columns: tuple[tuple[str, int], ...]  # (name, type OID)


@dataclass
class Transaction:
    xid: int  # 32-bit, as Begin carries it
    txid: int  # 64-bit
    commit_lsn: int
    commit_time: int  # µs since 2000-01-01 UTC (the Postgres epoch)
    records: list[Record] = field(default_factory=list)
    end_lsn: int = 0


class Decoder:
    """Turns a stream of pgoutput messages into complete transactions of change log records.

    ``relation_id`` gives the change log's id for a relation (stored with its changes);
    ``widen`` gives the 64-bit txid of Begin's 32-bit xid.
    """

    def __init__(
        self,
        selector_column: str,
        relation_id: Callable[[Relation], int],
        widen: Callable[[int], int],
    ) -> None:
        self.selector_column = selector_column
        self.relation_id = relation_id
        self.widen = widen
        # Postgres's relation OID -> (relation, its id in the change log, selector column's
        # position or -1, whether it is ``changebroker_ddl``).
        self.relations: dict[int, tuple[Relation, int, int, bool]] = {}
        self.current: Transaction | None = None

    def decode(self, data: bytes, wal_start: int) -> Transaction | None:
        """Feed one message; returns the transaction its Commit completes, else None."""
        current = self.current
        kind = data[0]
        if kind == _INSERT:  # by far the most frequent: only the selector is read
            relation, relation_id, at, ddl_table = self.relations[_UINT32.unpack_from(data, 1)[0]]
            if current is None:
                raise ValueError("change outside a transaction")
            if ddl_table:
                self._ddl(data, relation, current, wal_start)
                return None
            records = current.records
            records.append(
                (
                    _text_at(data, 6, at) or NO_SELECTOR,  # after relid and 'N'
                    current.commit_lsn,
                    len(records),
                    current.txid,
                    BODY.pack(wal_start, current.commit_time, relation_id) + data,
                )
            )
        elif kind in (_UPDATE, _DELETE):
            relation, relation_id, _, ddl_table = self.relations[_UINT32.unpack_from(data, 1)[0]]
            if current is None:
                raise ValueError("change outside a transaction")
            if ddl_table:
                self._ddl(data, relation, current, wal_start)
                return None
            _, new, old = rows(data, 0, relation)
            records = current.records
            records.append(
                (
                    _selector_of(new, old, self.selector_column),
                    current.commit_lsn,
                    len(records),
                    current.txid,
                    BODY.pack(wal_start, current.commit_time, relation_id) + data,
                )
            )
        elif kind == 0x42:  # 'B'
            commit_lsn, commit_time, xid = struct.unpack_from("!QqI", data, 1)
            self.current = Transaction(xid, self.widen(xid), commit_lsn, commit_time)
        elif kind == 0x43:  # 'C': flags, commit LSN (Begin's), end LSN
            (end_lsn,) = struct.unpack_from("!Q", data, 10)
            if current is None:
                raise ValueError("Commit without Begin")
            self.current = None
            current.end_lsn = end_lsn
            return current
        elif kind == 0x52:  # 'R'
            self._relation(data)
        elif kind == 0x54:  # 'T': relation count, options (CASCADE, RESTART IDENTITY), relids
            if current is None:
                raise ValueError("Truncate outside a transaction")
            (count,) = _INT32.unpack_from(data, 1)
            for relid in struct.unpack_from(f"!{count}I", data, 6):
                relation, _, at, _ = self.relations[relid]
                event = ddl.TableEvent(relation.table, TRUNCATE, "truncated", at >= 0)
                self._table_event(event, current, wal_start)
        # 'Y' (type), 'O' (origin) and anything newer carry nothing a change needs.
        return None

    def _ddl(self, data: bytes, relation: Relation, current: Transaction, wal_start: int) -> None:
        """The table events a change of ``changebroker_ddl`` brings, in its place: the change
        itself is the capture's bookkeeping, no reader's data."""
        operation, new, old = rows(data, 0, relation)
        events = ddl.table_events(
            operation,
            {name: value for name, value, _ in new} if new is not None else None,
            {name: value for name, value, _ in old} if old is not None else None,
            self.selector_column,
        )
        for event in events:
            self._table_event(event, current, wal_start)

    def _table_event(self, event: ddl.TableEvent, current: Transaction, wal_start: int) -> None:
        if event.operation == CREATE:
            selector = NO_RESET
        else:
            selector = RESET_EVERY if event.selected else RESET_UNSELECTED
        log.info(
            "table event",
            extra=logs.fields(table=event.table, operation=event.operation, detail=event.detail),
        )
        # A relation without columns: the table's name is all a table event's body needs.
        relation_id = self.relation_id(Relation(event.table, ()))
        message = bytes((TABLE_EVENT, event.operation)) + event.detail.encode()
        records = current.records
        records.append(
            (
                selector,
                current.commit_lsn,
                len(records),
                current.txid,
                BODY.pack(wal_start, current.commit_time, relation_id) + message,
            )
        )

    def _relation(self, data: bytes) -> None:
        (relid,) = _UINT32.unpack_from(data, 1)
        pos = 5
        schema, pos = _string(data, pos)
        name, pos = _string(data, pos)
        pos += 1  # replica identity setting, unused
        (count,) = struct.unpack_from("!h", data, pos)
        pos += 2
        columns = []
        for _ in range(count):
            column, pos = _string(data, pos + 1)  # after flags (part of the key), unused
            (oid,) = _UINT32.unpack_from(data, pos)
            columns.append((column, oid))
            pos += 8  # type OID, type modifier (unused)
        relation = Relation(f"{schema or 'public'}.{name}", tuple(columns))
        names = [column for column, _ in columns]
        at = names.index(self.selector_column) if self.selector_column in names else -1
        ddl_table = relation.table == ddl.DDL_TABLE
        self.relations[relid] = (relation, self.relation_id(relation), at, ddl_table)


def _string(data: bytes, pos: int) -> tuple[str, int]:
    end = data.index(0, pos)
    return data[pos:end].decode(), end + 1


def _text_at(data: bytes, pos: int, at: int) -> str | None:
    """Column ``at``'s text in the tuple at ``data[pos:]`` (None: NULL, unsent, or no such)."""
    if at < 0:
        return None
    pos += 2  # the column count
    for _ in range(at):
        kind = data[pos]
        if kind == _TEXT:
            pos += 5 + _INT32.unpack_from(data, pos + 1)[0]
        elif kind in (_NULL, _UNCHANGED):
            pos += 1
        else:
            raise ValueError(f"unexpected tuple data kind {chr(kind)!r}")
    if data[pos] != _TEXT:
        return None
    (length,) = _INT32.unpack_from(data, pos + 1)
    return data[pos + 5 : pos + 5 + length].decode()


def _selector_of(new: Row | None, old: Row | None, column: str) -> str:
    """The selector column's value, the old row's winning (an update may move a row out).

    An old row's NULL selector does not win: a key-only old row carries NULL for every
    column outside the key, and a row that had none and now has one is its new selector's.
    """
    for row in (old, new):
        for name, value, _ in row or ():
            if name == column and value is not None:
                return value
    return NO_SELECTOR


def rows(data: bytes, pos: int, relation: Relation) -> tuple[int, Row | None, Row | None]:
    """(operation, new row, old row) of the Insert, Update or Delete message at ``data[pos:]``;
    a table event has neither row."""
    kind = data[pos]
    if kind == TABLE_EVENT:
        return data[pos + 1], None, None
    pos += 5  # after the kind and the relation OID
    if kind == _INSERT:
        new, _ = _tuple(data, pos + 1, relation, None)  # after 'N'
        return INSERT, new, None
    if kind == _UPDATE:
        old = None
        whole_old = None
        if data[pos] in b"KO":
            full = data[pos] == _FULL_OLD
            old, pos = _tuple(data, pos + 1, relation, None)
            whole_old = old if full else None
        new, _ = _tuple(data, pos + 1, relation, whole_old)  # after 'N'
        return UPDATE, new, old
    if kind == _DELETE:
        old, _ = _tuple(data, pos + 1, relation, None)  # after 'K' or 'O'
        return DELETE, None, old
    raise ValueError(f"not a change message: {chr(kind)!r}")


def table_event_detail(data: bytes, pos: int) -> str:
    """What happened, of the table event message at ``data[pos:]``."""
    return data[pos + 2 :].decode()


def _tuple(data: bytes, pos: int, relation: Relation, old: Row | None) -> tuple[Row, int]:
    """The row at ``data[pos:]`` and the position after it; ``old`` a whole old row or None."""
    # Locals and precompiled structs: this runs for every change served, and for every
    # change the bridge reads (a fifth less than indexing the columns and advancing in steps).
    (count,) = _INT16.unpack_from(data, pos)
    pos += 2
    described = relation.columns
    if count > len(described):
        raise ValueError(f"a row of {count} columns, but {relation.table} has {len(described)}")
    columns: Row = []
    append, length_at = columns.append, _INT32.unpack_from
    for name, oid in described[:count]:
        kind = data[pos]
        if kind == _TEXT:
            end = pos + 5 + length_at(data, pos + 1)[0]
            append((name, data[pos + 5 : end].decode(), oid))
            pos = end
        elif kind == _NULL:
            append((name, None, oid))
            pos += 1
        elif kind == _UNCHANGED:
            pos += 1
            # Only a whole old row (REPLICA IDENTITY FULL) knows the value; else leave it out.
            for old_name, old_value, _ in old or ():
                if old_name == name:
                    append((name, old_value, oid))
        else:
            raise ValueError(f"unexpected tuple data kind {chr(kind)!r}")
    return columns, pos
