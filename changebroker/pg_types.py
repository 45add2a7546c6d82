"""Postgres types of the change format: one table, each type with every rendering of it.

A value leaves Postgres as its text output with its type OID (changeserver/README.md
"Values"), and each part renders it from the OID:

* ``protobuf``: the ``ValuePb`` field transicator's output plugin types it as (``/changes``,
  ``/snapshots`` and the Python client read the JSON format's text the same way); a JSON
  answer spells a value typed ``bool`` ``true``/``false``, as transicator prints it;
* ``json``: the bridge's event value (bridge/values.py), ``schema`` its JSON Schema
  types and ``note`` what the property's description says of it;
* ``kind``: the replay's column kind (replay/columns.py), ``spark`` the snapshot's column type.

A type the table does not list (an enum, a domain, the database's own) is text throughout.
Adding a column type is a row here, and the part that renders it a new way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Protobuf = Literal["int", "double", "bool", "bytes", "string"]
JsonValue = Literal["bool", "int", "float", "timestamptz", "timestamp", "base64", "json", "text"]
Kind = Literal[
    "bool",
    "int2",
    "int4",
    "int8",
    "oid",
    "float4",
    "float8",
    "timestamptz",
    "timestamp",
    "bytea",
    "json",
    "text",
]


@dataclass(frozen=True)
class PgType:
    oid: int
    name: str  # as format_type() spells it, without a type modifier
    protobuf: Protobuf = "string"
    json: JsonValue = "text"
    schema: tuple[str, ...] | None = ("string",)  # None: any JSON value
    note: str = ""
    kind: Kind = "text"
    spark: str = "string"  # Spark SQL's DDL spelling


_INTEGER: dict[str, Any] = {"protobuf": "int", "json": "int", "schema": ("integer",)}
_FLOAT: dict[str, Any] = {
    "protobuf": "double",
    "json": "float",
    "schema": ("number", "string"),
    "note": "NaN and infinities as strings",
}

BOOL = PgType(16, "boolean", "bool", "bool", ("boolean",), kind="bool", spark="boolean")
BYTEA = PgType(17, "bytea", "bytes", "base64", note="base64", kind="bytea", spark="binary")
INT8 = PgType(20, "bigint", **_INTEGER, kind="int8", spark="bigint")
INT2 = PgType(21, "smallint", **_INTEGER, kind="int2", spark="smallint")
INT4 = PgType(23, "integer", **_INTEGER, kind="int4", spark="int")
TEXT = PgType(25, "text")
OID = PgType(26, "oid", **_INTEGER, kind="oid", spark="bigint")
JSON = PgType(114, "json", json="json", schema=None, kind="json")
FLOAT4 = PgType(700, "real", **_FLOAT, kind="float4", spark="float")
FLOAT8 = PgType(701, "double precision", **_FLOAT, kind="float8", spark="double")
MONEY = PgType(790, "money", note="as Postgres prints it")
TIMESTAMP = PgType(
    1114,
    "timestamp without time zone",
    json="timestamp",
    note="RFC 3339 without offset",
    kind="timestamp",
)
TIMESTAMPTZ = PgType(
    1184,
    "timestamp with time zone",
    json="timestamptz",
    note="RFC 3339 with offset",
    kind="timestamptz",
    spark="timestamp",
)
NUMERIC = PgType(1700, "numeric", note="as a string, every digit kept")
JSONB = PgType(3802, "jsonb", json="json", schema=None, kind="json")

# Every built-in type a reader may meet by name (the bridge's schemas name a column's type
# as format_type() does; a snapshot's manifest gives its OID), by OID.
TYPES = (
    BOOL,
    BYTEA,
    PgType(18, '"char"'),
    PgType(19, "name"),
    INT8,
    INT2,
    INT4,
    TEXT,
    OID,
    JSON,
    PgType(142, "xml"),
    PgType(600, "point"),
    PgType(650, "cidr"),
    FLOAT4,
    FLOAT8,
    MONEY,
    PgType(829, "macaddr"),
    PgType(869, "inet"),
    PgType(1000, "boolean[]"),
    PgType(1005, "smallint[]"),
    PgType(1007, "integer[]"),
    PgType(1009, "text[]"),
    PgType(1015, "character varying[]"),
    PgType(1016, "bigint[]"),
    PgType(1021, "real[]"),
    PgType(1022, "double precision[]"),
    PgType(1042, "character"),
    PgType(1043, "character varying"),
    PgType(1082, "date"),
    PgType(1083, "time without time zone"),
    TIMESTAMP,
    TIMESTAMPTZ,
    PgType(1186, "interval"),
    PgType(1266, "time with time zone"),
    PgType(1560, "bit"),
    PgType(1562, "bit varying"),
    NUMERIC,
    PgType(2950, "uuid"),
    PgType(3614, "tsvector"),
    JSONB,
)

BY_OID = {t.oid: t for t in TYPES}
BY_NAME = {t.name: t for t in TYPES}


def of(oid: int) -> PgType:
    """The type of ``oid``; one the table does not list renders as text."""
    return BY_OID.get(oid) or PgType(oid, f"type {oid}")


def typed_as(field: Protobuf) -> frozenset[int]:
    """The OIDs whose values transicator's protobuf carries in ``field``."""
    return frozenset(t.oid for t in TYPES if t.protobuf == field)
