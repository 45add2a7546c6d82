"""Decoding of the built-in ``pgoutput`` plugin's messages (protocol version 1).

Tuple data arrives in text form. A column marked ``u`` (an unchanged TOASTed
value Postgres did not send) takes its value from the old row when the old row
carries it (REPLICA IDENTITY FULL); otherwise the column is left out of the row:
a consumer sees "not sent", never a wrong value.

TRUNCATE yields no change: the transicator API has no operation for it, so it
is skipped with a warning naming the tables (consumers must be told out of band).
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field

from changebroker import logs

log = logging.getLogger(__name__)

INSERT, UPDATE, DELETE = 1, 2, 3
_INT16 = struct.Struct("!h")
_INT32 = struct.Struct("!i")
_UINT32 = struct.Struct("!I")

# (name, text value or None, type OID) in column order.
Column = tuple[str, str | None, int]


@dataclass(frozen=True)
class Relation:
    table: str  # schema.table
    columns: list[tuple[str, int]]  # (name, type OID)


@dataclass
class Change:
    operation: int
    table: str
    change_lsn: int  # the WAL position of this change (transicator's changeSequence)
    new: list[Column] | None
    old: list[Column] | None


@dataclass
class Transaction:
    xid: int  # 32-bit, as Begin carries it
    commit_lsn: int
    commit_time: int  # µs since 2000-01-01 UTC (the Postgres epoch)
    changes: list[Change] = field(default_factory=list)
    end_lsn: int = 0


class Reader:
    """A cursor over one message's bytes."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def int16(self) -> int:
        (value,) = struct.unpack_from("!h", self.data, self.pos)
        self.pos += 2
        return int(value)

    def int32(self) -> int:
        (value,) = struct.unpack_from("!i", self.data, self.pos)
        self.pos += 4
        return int(value)

    def uint32(self) -> int:
        (value,) = struct.unpack_from("!I", self.data, self.pos)
        self.pos += 4
        return int(value)

    def int64(self) -> int:
        (value,) = struct.unpack_from("!q", self.data, self.pos)
        self.pos += 8
        return int(value)

    def uint64(self) -> int:
        (value,) = struct.unpack_from("!Q", self.data, self.pos)
        self.pos += 8
        return int(value)

    def string(self) -> str:
        end = self.data.index(0, self.pos)
        value = self.data[self.pos : end].decode()
        self.pos = end + 1
        return value


class Decoder:
    """Turns a stream of pgoutput messages into complete transactions."""

    def __init__(self) -> None:
        self.relations: dict[int, Relation] = {}
        self.current: Transaction | None = None

    def decode(self, data: bytes, wal_start: int) -> Transaction | None:
        """Feed one message; returns the transaction its Commit completes, else None."""
        if data[0] == 0x49:  # 'I', by far the most frequent: a path without the Reader
            relation = self.relations[_UINT32.unpack_from(data, 1)[0]]
            new, _ = _tuple(data, 6, relation, None)  # after relid and 'N'
            self._add(Change(INSERT, relation.table, wal_start, new, None))
            return None
        reader = Reader(data)
        kind = chr(reader.byte())
        if kind == "B":
            commit_lsn = reader.uint64()
            commit_time = reader.int64()
            self.current = Transaction(
                xid=reader.uint32(), commit_lsn=commit_lsn, commit_time=commit_time
            )
        elif kind == "C":
            reader.byte()  # flags, unused
            reader.uint64()  # commit LSN, the same as Begin's
            end_lsn = reader.uint64()
            done, self.current = self.current, None
            if done is None:
                raise ValueError("Commit without Begin")
            done.end_lsn = end_lsn
            return done
        elif kind == "R":
            relid = reader.uint32()
            schema, name = reader.string(), reader.string()
            reader.byte()  # replica identity setting, unused
            columns = []
            for _ in range(reader.int16()):
                reader.byte()  # flags (part of the key), unused
                column = reader.string()
                columns.append((column, reader.uint32()))
                reader.int32()  # type modifier, unused
            self.relations[relid] = Relation(f"{schema or 'public'}.{name}", columns)
        elif kind == "U":
            relation = self.relations[reader.uint32()]
            old = None
            if data[reader.pos] in b"KO":
                old, reader.pos = _tuple(data, reader.pos + 1, relation, None)
            new, reader.pos = _tuple(data, reader.pos + 1, relation, old)  # after 'N'
            self._add(Change(UPDATE, relation.table, wal_start, new, old))
        elif kind == "D":
            relation = self.relations[reader.uint32()]
            old, reader.pos = _tuple(data, reader.pos + 1, relation, None)  # after 'K' or 'O'
            self._add(Change(DELETE, relation.table, wal_start, None, old))
        elif kind == "T":
            count = reader.int32()
            reader.byte()  # options (CASCADE, RESTART IDENTITY)
            tables = [self.relations[reader.uint32()] for _ in range(count)]
            log.warning(
                "truncate skipped: the transicator API cannot express it",
                extra=logs.fields(tables=",".join(t.table for t in tables)),
            )
        # 'Y' (type), 'O' (origin) and anything newer carry nothing a change needs.
        return None

    def _add(self, change: Change) -> None:
        if self.current is None:
            raise ValueError("change outside a transaction")
        self.current.changes.append(change)


def _tuple(
    data: bytes, pos: int, relation: Relation, old: list[Column] | None
) -> tuple[list[Column], int]:
    """The row at ``data[pos:]`` and the position after it."""
    # The hot loop of ingest: locals and precompiled structs, no Reader method calls.
    (count,) = _INT16.unpack_from(data, pos)
    pos += 2
    described = relation.columns
    columns: list[Column] = []
    for number in range(count):
        name, oid = described[number]
        kind = data[pos]
        pos += 1
        if kind == 0x74:  # 't': text
            (length,) = _INT32.unpack_from(data, pos)
            pos += 4
            columns.append((name, data[pos : pos + length].decode(), oid))
            pos += length
        elif kind == 0x6E:  # 'n': NULL
            columns.append((name, None, oid))
        elif kind == 0x75:  # 'u': unchanged TOAST
            # Only the old row (REPLICA IDENTITY FULL) knows the value; else leave it out.
            for old_name, old_value, _ in old or ():
                if old_name == name:
                    columns.append((name, old_value, oid))
        else:
            raise ValueError(f"unexpected tuple data kind {chr(kind)!r}")
    return columns, pos
