"""Postgres text output -> JSON values: nothing changes meaning on the way."""

from __future__ import annotations

import base64

import pytest

from changebroker.broker.bridge import values
from changebroker.broker.bridge.values import (
    BOOL,
    BYTEA,
    FLOAT8,
    INT8,
    JSONB,
    NUMERIC,
    TIMESTAMP,
    TIMESTAMPTZ,
)
from changebroker.broker.event_types.effective_schema import EventValidator

CASES = [
    (BOOL, "true", True),
    (BOOL, "false", False),
    (BOOL, "t", True),
    (BOOL, "f", False),
    (INT8, "-9223372036854775808", -9223372036854775808),
    (
        NUMERIC,
        "123456789012345678901234567890.000000001",
        "123456789012345678901234567890.000000001",
    ),
    (NUMERIC, "NaN", "NaN"),
    (FLOAT8, "0.30000000000000004", 0.30000000000000004),
    (FLOAT8, "-Infinity", "-Infinity"),
    (TIMESTAMPTZ, "2026-11-23 02:37:49.123456+00", "2026-11-23T02:37:49.123456+00:00"),
    (TIMESTAMPTZ, "2026-11-23 08:07:49+05:30", "2026-11-23T08:07:49+05:30"),
    (TIMESTAMPTZ, "infinity", "infinity"),
    (TIMESTAMP, "2026-11-23 02:37:49", "2026-11-23T02:37:49"),
    (BYTEA, "\\x", ""),
    (BYTEA, "\\xdeadbeef", base64.b64encode(bytes.fromhex("deadbeef")).decode()),
    (JSONB, '{"a": [1, "x", null, {"b": 1.5}]}', {"a": [1, "x", None, {"b": 1.5}]}),
    (JSONB, "null", None),
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
    assert values.to_json(None, INT8) is None
    nullable = {"type": "object", "properties": {"v": values.column_schema(INT8, "bigint", True)}}
    required = {"type": "object", "properties": {"v": values.column_schema(INT8, "bigint", False)}}
    assert EventValidator(nullable).first_error({"v": None}) is None
    assert EventValidator(required).first_error({"v": None}) is not None
