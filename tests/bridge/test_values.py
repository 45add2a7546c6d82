"""Postgres text output -> JSON values: nothing changes meaning on the way."""

from __future__ import annotations

import base64

import pytest

from changebroker.bridge import values
from changebroker.broker.event_types.effective_schema import EventValidator
from changebroker.pg_types import BOOL, BYTEA, FLOAT8, INT8, JSONB, NUMERIC, TIMESTAMP, TIMESTAMPTZ

CASES = [
    (BOOL.oid, "true", True),
    (BOOL.oid, "false", False),
    (BOOL.oid, "t", True),
    (BOOL.oid, "f", False),
    (INT8.oid, "-9223372036854775808", -9223372036854775808),
    (
        NUMERIC,
        "123456789012345678901234567890.000000001",
        "123456789012345678901234567890.000000001",
    ),
    (NUMERIC.oid, "NaN", "NaN"),
    (FLOAT8.oid, "0.30000000000000004", 0.30000000000000004),
    (FLOAT8.oid, "-Infinity", "-Infinity"),
    (TIMESTAMPTZ.oid, "2026-11-23 02:37:49.123456+00", "2026-11-23T02:37:49.123456+00:00"),
    (TIMESTAMPTZ.oid, "2026-11-23 08:07:49+05:30", "2026-11-23T08:07:49+05:30"),
    (TIMESTAMPTZ.oid, "infinity", "infinity"),
    (TIMESTAMP.oid, "2026-11-23 02:37:49", "2026-11-23T02:37:49"),
    (BYTEA.oid, "\\x", ""),
    (BYTEA.oid, "\\xdeadbeef", base64.b64encode(bytes.fromhex("deadbeef")).decode()),
    (JSONB.oid, '{"a": [1, "x", null, {"b": 1.5}]}', {"a": [1, "x", None, {"b": 1.5}]}),
    (JSONB.oid, "null", None),
    (25, "plain text", "plain text"),
]


@pytest.mark.parametrize(("oid", "text", "expected"), CASES)
def test_values_keep_their_meaning_and_fit_their_schema(
    oid: int, text: str, expected: object
) -> None:
    value = values.to_json(text, oid)
    assert value == expected and type(value) is type(expected)
    schema = {"type": "object", "properties": {"v": values.column_schema(oid, "t", False)}}
    assert EventValidator(schema).first_error({"v": value}) is None


def test_null_is_null_and_only_nullable_columns_admit_it() -> None:
    assert values.to_json(None, INT8.oid) is None
    nullable = {
        "type": "object",
        "properties": {"v": values.column_schema(INT8.oid, "bigint", True)},
    }
    required = {
        "type": "object",
        "properties": {"v": values.column_schema(INT8.oid, "bigint", False)},
    }
    assert EventValidator(nullable).first_error({"v": None}) is None
    assert EventValidator(required).first_error({"v": None}) is not None
