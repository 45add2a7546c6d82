"""Every common type round-trips, in JSON and in protobuf, NULLs included."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg

from changebroker import transicator_pb2 as pb
from tests.support.changeserver import Harness

COLUMNS = {
    "c_int2": ("int2", "-32768"),
    "c_int4": ("int4", "2147483647"),
    "c_int8": ("int8", "-9223372036854775808"),
    "c_numeric": ("numeric", "12345678901234567890.123456789"),
    "c_float4": ("float4", "1.5"),
    "c_float8": ("float8", "-2.25e+100"),
    "c_bool": ("bool", "t"),
    "c_text": ("text", 'héllo, "world"\n\\'),
    "c_varchar": ("varchar(10)", "abc"),
    "c_char": ("char(4)", "ab"),
    "c_bytea": ("bytea", "\\x00ff10"),
    "c_date": ("date", "2024-02-29"),
    "c_time": ("time", "23:59:59.123456"),
    "c_timestamp": ("timestamp", "2024-01-02 03:04:05.678901"),
    "c_timestamptz": ("timestamptz", "2024-01-02 03:04:05.678901+02"),
    "c_uuid": ("uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    "c_json": ("json", '{"b": [1, 2], "a": null}'),
    "c_jsonb": ("jsonb", '{"b": [1, 2], "a": null}'),
    "c_int_array": ("int4[]", "{1,NULL,3}"),
    "c_text_array": ("text[]", '{"a b",c}'),
}


def _expected(cs: Harness) -> tuple[dict[str, str], dict[str, int]]:
    """What Postgres itself prints (in the server's fixed output settings) and each type OID."""
    with psycopg.connect(cs.dsn, autocommit=True) as conn:
        conn.execute("SET timezone = 'UTC'; SET datestyle = 'ISO'; SET extra_float_digits = 3")
        names = ", ".join(f"{name}::text" for name in COLUMNS)
        row = conn.execute(f"SELECT {names} FROM typed WHERE id = 1").fetchone()
        assert row is not None
        oids: dict[str, int] = dict(
            conn.execute(
                "SELECT attname::text, atttypid::int FROM pg_attribute"
                " WHERE attrelid = 'typed'::regclass AND attnum > 0"
            ).fetchall()
        )
    texts = dict(zip(COLUMNS, row, strict=True))
    # bool::text spells "true", as transicator's JSON does (bool's output function: "t").
    assert texts["c_bool"] == "true"
    # char(n)::text drops the padding that bpchar's output function keeps.
    texts["c_char"] = texts["c_char"].ljust(4)
    return texts, oids


def test_types_round_trip_in_json_and_protobuf(cs: Harness) -> None:
    columns = ", ".join(f"{name} {kind}" for name, (kind, _) in COLUMNS.items())
    cs.sql(f"CREATE TABLE typed (id int PRIMARY KEY, _change_selector text, {columns})")
    names = ", ".join(COLUMNS)
    marks = ", ".join(["%s"] * len(COLUMNS))
    values = [value for _, value in COLUMNS.values()]
    cs.sql(f"INSERT INTO typed (id, _change_selector, {names}) VALUES (1, 't', {marks})", values)
    cs.sql("INSERT INTO typed (id, _change_selector) VALUES (2, 't')")
    texts, oids = _expected(cs)

    changes = cs.wait_for(2, scope="t")["changes"]
    full, nulls = changes[0]["newRow"], changes[1]["newRow"]
    for name in COLUMNS:
        assert full[name] == {"value": texts[name], "type": oids[name]}, name
        assert nulls[name] == {"value": None, "type": oids[name]}, name

    response = httpx.get(
        f"{cs.url}/changes",
        params={"scope": "t"},
        headers={"accept": "application/transicator+protobuf"},
    )
    assert response.headers["content-type"] == "application/transicator+protobuf"
    decoded = pb.ChangeListPb.FromString(response.content)
    assert decoded.lastSequence == changes[-1]["sequence"]
    assert [c.sequence for c in decoded.changes] == [c["sequence"] for c in changes]
    first, second = decoded.changes
    assert first.table == "public.typed" and first.operation == 1
    assert first.transactionIDEpoch == changes[0]["txid"]
    typed: dict[str, Any] = {}
    for column in first.newColumns:
        assert column.type == oids[column.name]
        typed[column.name] = getattr(column.value, column.value.WhichOneof("value"))
    assert typed["c_int2"] == -32768 and typed["c_int8"] == -9223372036854775808
    assert typed["c_float4"] == 1.5 and typed["c_float8"] == -2.25e100
    assert typed["c_bool"] is True
    assert typed["c_bytea"] == b"\x00\xff\x10"
    for name in set(COLUMNS) - {
        "c_int2",
        "c_int4",
        "c_int8",
        "c_float4",
        "c_float8",
        "c_bool",
        "c_bytea",
    }:
        assert typed[name] == texts[name], name
    assert typed["c_int4"] == 2147483647
    for column in second.newColumns:
        if column.name in COLUMNS:
            assert not column.HasField("value"), column.name


def test_bool_values_are_spelled_as_transicator_spells_them(cs: Harness) -> None:
    cs.sql("CREATE TABLE flags (id int PRIMARY KEY, yes bool, no bool, unknown bool)")
    cs.sql("INSERT INTO flags VALUES (1, true, false, NULL)")
    row = cs.wait_for(1)["changes"][0]["newRow"]
    assert row["yes"] == {"value": "true", "type": 16}
    assert row["no"] == {"value": "false", "type": 16}
    assert row["unknown"] == {"value": None, "type": 16}

    protobuf = {"accept": "application/transicator+protobuf"}
    response = httpx.get(f"{cs.url}/changes", headers=protobuf)
    (change,) = pb.ChangeListPb.FromString(response.content).changes
    values = {c.name: c.value for c in change.newColumns}
    assert values["yes"].WhichOneof("value") == "bool" and values["yes"].bool is True
    assert values["no"].WhichOneof("value") == "bool" and values["no"].bool is False
    assert not values["unknown"].HasField("bool")
    # Field 6, varint: what transicator's ValuePb carries for a bool.
    assert values["yes"].SerializeToString() == b"\x30\x01"
    assert values["no"].SerializeToString() == b"\x30\x00"
