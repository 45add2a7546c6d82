"""A change as stored in the change log, and as the API serves it (JSON or protobuf).

Stored bodies are ``marshal``-encoded tuples (``(operation, table, change LSN,
commit time, xid, new row, old row)``, rows as ``[(name, text, oid), ...]``):
only this module writes and reads them, and marshal is several times cheaper
than JSON on the ingest path. The text form is what JSON serves as is; protobuf
values are typed from it per request.
"""

from __future__ import annotations

import marshal
from typing import Any

from changeserver import transicator_pb2 as pb
from changeserver.pgoutput import Column, Transaction
from changeserver.sequence import Sequence

# Postgres type OIDs that transicator's protobuf carries typed; everything else is a string.
_BOOL, _BYTEA, _INT8, _INT2, _INT4, _OID, _FLOAT4, _FLOAT8 = 16, 17, 20, 21, 23, 26, 700, 701
_INTS = {_INT2, _INT4, _INT8, _OID}
_FLOATS = {_FLOAT4, _FLOAT8}
_PG_EPOCH_UNIX_US = 946_684_800_000_000  # 2000-01-01 in Unix microseconds

_MARSHAL_VERSION = 4  # pinned: logs written by one Python stay readable by the next

Row = list[Column]


def selector_of(new: Row | None, old: Row | None, column: str) -> str:
    """The selector column's value, the old row's winning (an update may move a row out)."""
    for row in (old, new):
        for name, value, _ in row or ():
            if name == column and value is not None:
                return value
    return ""


def unix_us(pg_us: int) -> int:
    return pg_us + _PG_EPOCH_UNIX_US


def encode(transaction: Transaction, index: int) -> bytes:
    """The stored body of ``transaction.changes[index]``."""
    change = transaction.changes[index]
    return marshal.dumps(
        (
            change.operation,
            change.table,
            change.change_lsn,
            transaction.commit_time,
            transaction.xid,
            change.new,
            change.old,
        ),
        _MARSHAL_VERSION,
    )


def _json_row(row: Row | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {name: {"value": value, "type": oid} for name, value, oid in row}


def to_json(lsn: int, idx: int, txid: int, data: bytes) -> dict[str, Any]:
    operation, table, change_lsn, commit_time, _, new, old = marshal.loads(data)
    change: dict[str, Any] = {
        "operation": operation,
        "table": table,
        "sequence": str(Sequence(lsn, idx)),
        "commitSequence": lsn,
        "changeSequence": change_lsn,
        "commitIndex": idx,
        "txid": txid,
        "timestamp": unix_us(commit_time) // 1_000_000,
    }
    if new is not None:
        change["newRow"] = _json_row(new)
    if old is not None:
        change["oldRow"] = _json_row(old)
    return change


def _value(text: str, oid: int) -> pb.ValuePb:
    """Typed as transicator's own output plugin typed it, falling back to the text."""
    try:
        if oid in _INTS:
            return pb.ValuePb(int=int(text))
        if oid in _FLOATS:
            return pb.ValuePb(double=float(text))
        if oid == _BOOL:
            return pb.ValuePb(bool=text == "t")
        if oid == _BYTEA and text.startswith("\\x"):
            return pb.ValuePb(bytes=bytes.fromhex(text[2:]))
    except ValueError:
        pass
    return pb.ValuePb(string=text)


def _pb_row(row: Row | None) -> list[pb.ColumnPb]:
    columns = []
    for name, value, oid in row or ():
        column = pb.ColumnPb(name=name, type=oid)
        if value is not None:  # NULL: a column without a value, as transicator sends it
            column.value.CopyFrom(_value(value, oid))
        columns.append(column)
    return columns


def to_protobuf(lsn: int, idx: int, txid: int, data: bytes) -> pb.ChangePb:
    operation, table, change_lsn, commit_time, xid, new, old = marshal.loads(data)
    return pb.ChangePb(
        operation=operation,
        table=table,
        sequence=str(Sequence(lsn, idx)),
        commitSequence=lsn,
        changeSequence=change_lsn,
        commitIndex=idx,
        transactionID=xid,
        transactionIDEpoch=txid,
        timestamp=unix_us(commit_time) // 1_000_000,
        newColumns=_pb_row(new),
        oldColumns=_pb_row(old),
    )
