"""A change as the API serves it (JSON, protobuf, or the bridge's compact form), from its
stored body.

A stored body is the change's pgoutput message behind ``pgoutput.BODY`` (see
``pgoutput``); it is decoded here, per request, into rows of Postgres's text
output. JSON serves the text (bool as transicator spells it); protobuf values are typed from it.
A table event (only ``table`` reads serve one) has no rows; JSON adds its ``detail``.

The compact form serves the stored bodies as they are, with the relations they name: its
reader decodes them with the same code into what the JSON answer reads back as.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from json.encoder import encode_basestring_ascii as _string  # json.dumps's, ensure_ascii
from typing import Any

from changebroker import pg_types
from changebroker import transicator_pb2 as pb
from changebroker.changeserver import pgoutput, sequence
from changebroker.changeserver.pgoutput import Relation, Row
from changebroker.changeserver.sequence import Sequence

# Postgres type OIDs that transicator's protobuf carries typed; everything else is a string.
_INTS = pg_types.typed_as("int")
_FLOATS = pg_types.typed_as("double")
_BOOLS = pg_types.typed_as("bool")
_BYTES = pg_types.typed_as("bytes")
_PG_EPOCH_UNIX_US = 946_684_800_000_000  # 2000-01-01 in Unix microseconds

# The change log's relation for an id a body names.
Relations = Callable[[int], Relation]


def unix_us(pg_us: int) -> int:
    return pg_us + _PG_EPOCH_UNIX_US


def _decode(data: bytes, relations: Relations) -> tuple[int, str, int, int, Row | None, Row | None]:
    """(operation, table, change LSN, commit time, new row, old row) of a stored body."""
    change_lsn, commit_time, relation_id = pgoutput.BODY.unpack_from(data)
    relation = relations(relation_id)
    operation, new, old = pgoutput.rows(data, pgoutput.BODY.size, relation)
    return operation, relation.table, change_lsn, commit_time, new, old


# transicator's JSON gives each value as Go prints the value its plugin typed: a bool is
# "true"/"false" where Postgres's text output (served as is otherwise) spells "t"/"f".
_JSON_BOOL = {"t": "true", "f": "false"}


def _json_value(value: str | None, oid: int) -> str:
    if value is None:
        return "null"
    if oid in _BOOLS:
        value = _JSON_BOOL.get(value, value)
    return _string(value)


# The JSON around a column's value, before it (the name) and after it (the type), made once
# per column: a response of thousands of changes names the same few columns over and over.
# Bounded by the schemas served; emptied if it ever grows past _MOST_COLUMNS (a schema
# renaming columns forever).
_FRAMES: dict[tuple[str, int], tuple[str, str]] = {}
_MOST_COLUMNS = 65_536


def _frame(name: str, oid: int) -> tuple[str, str]:
    if len(_FRAMES) >= _MOST_COLUMNS:
        _FRAMES.clear()
    frame = _FRAMES[name, oid] = (_string(name) + ':{"value":', f',"type":{oid}}}')
    return frame


def _json_row(row: Row) -> str:
    frames = _FRAMES
    parts = []
    for name, value, oid in row:
        before, after = frames.get((name, oid)) or _frame(name, oid)
        parts.append(before + _json_value(value, oid) + after)
    return "{" + ",".join(parts) + "}"


def to_json(lsn: int, idx: int, txid: int, data: bytes, relations: Relations) -> str:
    """The change as ``/changes`` serves it in JSON: the text ``json.dumps(change,
    separators=(",", ":"))`` gives (ASCII, json's own string escaping), written directly.
    Building a dict per change and row for the encoder cost 2.5x as much, and a response of
    10,000 changes is mostly this (6.8 µs a change of four columns; 5.8 with each column's
    name and type rendered once and the sequence without a ``Sequence``)."""
    operation, table, change_lsn, commit_time, new, old = _decode(data, relations)
    text = (
        f'{{"operation":{operation},"table":{_string(table)},'
        f'"sequence":"{sequence.text(lsn, idx)}","commitSequence":{lsn},'
        f'"changeSequence":{change_lsn},"commitIndex":{idx},'
        f'"txid":{txid},"timestamp":{unix_us(commit_time) // 1_000_000}'
    )
    if new is not None:
        text += ',"newRow":' + _json_row(new)
    if old is not None:
        text += ',"oldRow":' + _json_row(old)
    elif new is None:  # a table event (TRUNCATE, DROP, CREATE, REDEFINE): what happened
        text += ',"detail":' + _string(pgoutput.table_event_detail(data, pgoutput.BODY.size))
    return text + "}"


def typed_value(text: str, oid: int) -> pb.ValuePb:
    """Typed as transicator's own output plugin typed it, falling back to the text."""
    try:
        if oid in _INTS:
            return pb.ValuePb(int=int(text))
        if oid in _FLOATS:
            return pb.ValuePb(double=float(text))
        if oid in _BOOLS:
            return pb.ValuePb(bool=text == "t")
        if oid in _BYTES and text.startswith("\\x"):
            return pb.ValuePb(bytes=bytes.fromhex(text[2:]))
    except ValueError:
        pass
    return pb.ValuePb(string=text)


def _pb_row(row: Row | None) -> list[pb.ColumnPb]:
    columns = []
    for name, value, oid in row or ():
        column = pb.ColumnPb(name=name, type=oid)
        if value is not None:  # NULL: a column without a value, as transicator sends it
            column.value.CopyFrom(typed_value(value, oid))
        columns.append(column)
    return columns


def to_protobuf(lsn: int, idx: int, txid: int, data: bytes, relations: Relations) -> pb.ChangePb:
    operation, table, change_lsn, commit_time, new, old = _decode(data, relations)
    return pb.ChangePb(
        operation=operation,
        table=table,
        sequence=sequence.text(lsn, idx),
        commitSequence=lsn,
        changeSequence=change_lsn,
        commitIndex=idx,
        transactionID=txid & 0xFFFFFFFF,  # the 32-bit xid
        transactionIDEpoch=txid,
        timestamp=unix_us(commit_time) // 1_000_000,
        newColumns=_pb_row(new),
        oldColumns=_pb_row(old),
    )


# The bridge's media type for it: /changes only, and only when named (a wildcard gets JSON).
COMPACT = "application/vnd.changebroker.pgoutput"
# The compact form, big-endian: first and last sequence (lsn, index each) and the number of
# relations; each relation as its id, table and columns (name, type OID); the number of
# changes; each change as its lsn, index, txid and stored body.
_COMPACT_HEAD = struct.Struct("!QIQII")
_RELATION = struct.Struct("!IHH")  # id, table's UTF-8 length, column count
_COLUMN = struct.Struct("!IH")  # type OID, name's UTF-8 length
_COUNT = struct.Struct("!I")
_CHANGE = struct.Struct("!QIQI")  # commit LSN, index, txid, body length


def to_compact(
    first: Sequence, last: Sequence, rows: list[tuple[int, int, int, bytes]], relations: Relations
) -> bytes:
    """An answer in the compact form: the stored bodies are written as they are, not decoded
    and rendered (the JSON of a change costs ~20x as much to make)."""
    named = {pgoutput.BODY.unpack_from(row[3])[2] for row in rows}
    parts = [_COMPACT_HEAD.pack(first.lsn, first.index, last.lsn, last.index, len(named))]
    for id in sorted(named):
        relation = relations(id)
        table = relation.table.encode()
        parts.append(_RELATION.pack(id, len(table), len(relation.columns)) + table)
        for name, oid in relation.columns:
            encoded = name.encode()
            parts.append(_COLUMN.pack(oid, len(encoded)) + encoded)
    parts.append(_COUNT.pack(len(rows)))
    pack = _CHANGE.pack
    for lsn, idx, txid, data in rows:
        parts.append(pack(lsn, idx, txid, len(data)))
        parts.append(data)
    return b"".join(parts)


def from_compact(data: bytes) -> dict[str, Any]:
    """A compact answer as the same answer in JSON reads back (``json.loads``): the bridge
    reads this way, each body decoded once, by the code that renders the JSON."""
    first_lsn, first_idx, last_lsn, last_idx, count = _COMPACT_HEAD.unpack_from(data)
    pos = _COMPACT_HEAD.size
    relations: dict[int, Relation] = {}
    for _ in range(count):
        id, table_length, column_count = _RELATION.unpack_from(data, pos)
        pos += _RELATION.size
        table = data[pos : pos + table_length].decode()
        pos += table_length
        columns = []
        for _ in range(column_count):
            oid, name_length = _COLUMN.unpack_from(data, pos)
            pos += _COLUMN.size
            columns.append((data[pos : pos + name_length].decode(), oid))
            pos += name_length
        relations[id] = Relation(table, tuple(columns))
    (count,) = _COUNT.unpack_from(data, pos)
    pos += _COUNT.size
    found = relations.__getitem__
    unpack, size = _CHANGE.unpack_from, _CHANGE.size
    listed = []
    # What the changes of one transaction share, worked out once for all of them.
    commit_lsn, prefix, commit_time, second = -1, "", -1, 0
    for _ in range(count):
        lsn, idx, txid, length = unpack(data, pos)
        pos += size
        body = data[pos : pos + length]
        operation, table, change_lsn, time, new, old = _decode(body, found)
        pos += length
        if lsn != commit_lsn:
            commit_lsn, prefix = lsn, sequence.text(lsn, 0)[:-1]
        if time != commit_time:
            commit_time, second = time, unix_us(time) // 1_000_000
        # As to_json writes it, key for key.
        change: dict[str, Any] = {
            "operation": operation,
            "table": table,
            "sequence": f"{prefix}{idx:x}",
            "commitSequence": lsn,
            "changeSequence": change_lsn,
            "commitIndex": idx,
            "txid": txid,
            "timestamp": second,
        }
        if new is not None:
            change["newRow"] = _mapping_row(new)
        if old is not None:
            change["oldRow"] = _mapping_row(old)
        elif new is None:
            change["detail"] = pgoutput.table_event_detail(body, pgoutput.BODY.size)
        listed.append(change)
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} bytes after the last change of a compact answer")
    return {
        "firstSequence": sequence.text(first_lsn, first_idx),
        "lastSequence": sequence.text(last_lsn, last_idx),
        "changes": listed,
    }


def _mapping_row(row: Row) -> dict[str, dict[str, Any]]:
    return {
        name: {
            "value": value if oid not in _BOOLS or value is None else _JSON_BOOL.get(value, value),
            "type": oid,
        }
        for name, value, oid in row
    }
