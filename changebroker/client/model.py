"""What a consumer is handed: changes, snapshot rows, and their typed column values.

Values are typed from the Postgres type OID, the same way whichever wire format carried
them (docs/specs/changeserver-api.yaml; changeserver/README.md "Values"): ``int2``,
``int4``, ``int8`` and ``oid`` as ``int``, ``float4`` and ``float8`` as ``float`` (NaN and
the infinities included), ``bool`` as ``bool``, ``bytea`` as ``bytes``, everything else as
Postgres's text output (``numeric``, ``timestamptz``, ``uuid``, ``json``...); SQL NULL is
``None``. A transicator server's protobuf ``timestamp`` value (microseconds since
2000-01-01) is a ``datetime`` in UTC.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from typing import Any

from changebroker import pg_types
from changebroker import transicator_pb2 as pb

Value = str | int | float | bool | bytes | datetime | None

_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


# Not frozen: a frozen dataclass's __init__ costs several times as much, and a feed makes one
# of these per value it hands out.
@dataclass(slots=True)
class Column:
    value: Value
    type: int  # the Postgres type OID


Row = dict[str, Column]


class Operation(IntEnum):
    INSERT = 1
    UPDATE = 2
    DELETE = 3


@dataclass(slots=True)
class Change:
    """One row change, as ``/changes`` serves it. ``new_row`` is there for inserts and
    updates, ``old_row`` for deletes and for updates of a table with a replica identity."""

    operation: Operation
    table: str  # schema.table
    sequence: str
    commit_sequence: int  # the transaction's commit LSN
    change_sequence: int  # the change's own LSN
    commit_index: int  # its place in the transaction
    txid: int
    timestamp: int  # commit time, seconds since the Unix epoch
    new_row: Row | None
    old_row: Row | None


@dataclass(frozen=True, slots=True)
class SnapshotStart:
    """A snapshot of the feed's selectors follows: drop every row you hold of them; the
    rows that follow, then the changes after ``sequence``, are the tables from now on."""

    snapshot_id: str
    sequence: str  # the snapshot holds exactly the changes up to here
    timestamp: str  # when it was made
    reason: str  # "first start" or "position too old"


@dataclass(slots=True)
class SnapshotRow:
    table: str  # schema.table
    row: Row


@dataclass(frozen=True, slots=True)
class SnapshotEnd:
    """The snapshot's last row has been handed out; changes after ``sequence`` follow."""

    snapshot_id: str
    sequence: str
    rows: int


Item = SnapshotStart | SnapshotRow | SnapshotEnd | Change


def _bytea(text: str) -> bytes:
    if not text.startswith("\\x"):
        raise ValueError(f"not hex bytea output: {text[:20]!r}")
    return bytes.fromhex(text[2:])


# Text (the JSON format's values) to a typed value, per OID, as the protobuf format types it;
# text that does not parse as the type says stays text, as the server's own protobuf rendering
# keeps it.
_TYPED: dict[pg_types.Protobuf, Callable[[str], Value]] = {
    "bool": lambda text: text in ("true", "t"),
    "bytes": _bytea,
    "int": int,
    "double": float,
}
_FROM_TEXT = {t.oid: _TYPED[t.protobuf] for t in pg_types.TYPES if t.protobuf in _TYPED}


def from_text(text: str | None, oid: int) -> Value:
    convert = _FROM_TEXT.get(oid)
    if convert is None or text is None:
        return text
    try:
        return convert(text)
    except ValueError:
        return text


def from_protobuf(value: pb.ValuePb) -> Value:
    kind = value.WhichOneof("value")
    if kind is None:  # an empty ValuePb: NULL
        return None
    if kind == "timestamp":
        return _PG_EPOCH + timedelta(microseconds=value.timestamp)
    found: Value = getattr(value, kind)
    return found


def json_row(row: Mapping[str, Any] | None) -> Row | None:
    """A JSON row (column -> ``{"value": text or null, "type": oid}``) typed."""
    if row is None:
        return None
    typed = {}
    for name, column in row.items():
        oid = column["type"]
        typed[name] = Column(from_text(column["value"], oid), oid)
    return typed


def protobuf_row(columns: Iterable[pb.ColumnPb]) -> Row | None:
    """A protobuf row; ``None`` when it has no columns (a change without that row)."""
    typed = {column.name: Column(from_protobuf(column.value), column.type) for column in columns}
    return typed or None
