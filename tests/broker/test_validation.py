"""The compiled validator (fastjsonschema) gives jsonschema's Draft4Validator's verdict.

Publishing trusts fastjsonschema for speed; this is the evidence that it is
the draft-04 semantics Nakadi's clients expect, keyword by keyword, on the
effective schemas the broker builds.
"""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import FormatChecker
from jsonschema.validators import Draft4Validator

from broker.event_types import effective_schema
from broker.event_types.effective_schema import EventValidator, is_date_time

_formats = FormatChecker(formats=())
_formats.checks("date-time")(is_date_time)

# (schema, [instances]): each instance is judged by both validators.
CASES: list[tuple[dict[str, Any], list[Any]]] = [
    ({"type": "integer"}, [1, 1.0, 1.5, True, "1", None]),
    ({"type": "number"}, [1, 1.5, True, "1"]),
    ({"type": ["string", "null"]}, ["a", None, 1]),
    ({"type": "object"}, [{}, [], "x"]),
    ({"type": "array", "items": {"type": "string"}}, [[], ["a"], ["a", 1], "a"]),
    ({"items": [{"type": "string"}], "additionalItems": False}, [["a"], ["a", "b"], [1]]),
    ({"minItems": 1, "maxItems": 2}, [[], [1], [1, 2, 3], "not an array"]),
    ({"uniqueItems": True}, [[1, 2], [1, 1], [{"a": 1}, {"a": 1}], [1, True], [0, False]]),
    ({"required": ["a"], "properties": {"a": {"type": "string"}}}, [{"a": "x"}, {}, {"a": 1}]),
    ({"properties": {"a": {}}, "additionalProperties": False}, [{"a": 1}, {"b": 1}]),
    ({"additionalProperties": {"type": "integer"}}, [{"a": 1}, {"a": "x"}]),
    ({"patternProperties": {"^x-": {"type": "string"}}}, [{"x-a": "s"}, {"x-a": 1}, {"y": 1}]),
    ({"minProperties": 1, "maxProperties": 1}, [{}, {"a": 1}, {"a": 1, "b": 2}]),
    ({"dependencies": {"a": ["b"]}}, [{"a": 1}, {"a": 1, "b": 1}, {"b": 1}]),
    ({"dependencies": {"a": {"required": ["c"]}}}, [{"a": 1}, {"a": 1, "c": 1}]),
    ({"enum": ["C", "U", 1]}, ["C", "X", 1, 1.0, True]),
    ({"minimum": 1, "exclusiveMinimum": True}, [1, 1.1, 0]),
    ({"maximum": 10, "exclusiveMaximum": False}, [10, 11]),
    ({"multipleOf": 0.5}, [1.5, 1.3, 2]),
    ({"minLength": 2, "maxLength": 3}, ["a", "ab", "abcd", "ü€", "😀😀"]),
    ({"pattern": "^[a-z]+$"}, ["abc", "aBc", ""]),
    ({"pattern": "b"}, ["abc", "xyz"]),
    ({"allOf": [{"type": "string"}, {"minLength": 2}]}, ["ab", "a", 1]),
    ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, ["a", 1, 1.5]),
    ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, [1, 3, 2.5, "x"]),
    ({"not": {"type": "string"}}, ["a", 1]),
    (
        {
            "definitions": {"id": {"type": "string"}},
            "properties": {"id": {"$ref": "#/definitions/id"}},
        },
        [{"id": "a"}, {"id": 1}],
    ),
    (
        {"type": "string", "format": "date-time"},
        ["2026-11-22T10:00:00Z", "2026-11-22T10:00:00.5+01:00", "2026-02-30T10:00:00Z", "tomorrow"],
    ),
    ({"format": "date-time"}, [1, None]),
]

USER_SCHEMA: dict[str, Any] = {
    "properties": {
        "order_number": {"type": "string"},
        "lines": {"type": "array", "items": {"properties": {"sku": {"type": "string"}}}},
    },
    "required": ["order_number"],
}
EID = "d765de34-09c0-4bbb-8b1e-7160a33a0791"
EVENTS: list[Any] = [
    {"order_number": "1", "metadata": {"eid": EID, "occurred_at": "2016-03-15T23:47:15+01:00"}},
    {"order_number": "1", "metadata": {"eid": "d765de34", "occurred_at": "2016-03-15T23:47:15Z"}},
    {"order_number": "1", "metadata": {"eid": EID}},
    {"order_number": "1", "metadata": {"eid": EID, "occurred_at": "2016-03-15"}},
    {"order_number": "1", "metadata": {"eid": EID, "occurred_at": "2016-03-15T23:47:15Z", "x": 1}},
    {
        "order_number": "1",
        "lines": [{"sku": "a", "qty": 1}],
        "metadata": {"eid": EID, "occurred_at": "2016-03-15T23:47:15Z"},
    },
    {"order_number": 1, "metadata": {"eid": EID, "occurred_at": "2016-03-15T23:47:15Z"}},
    {
        "order_number": "1",
        "extra": True,
        "metadata": {"eid": EID, "occurred_at": "2016-03-15T23:47:15Z"},
    },
    {"order_number": "1"},
    {
        "data": {"order_number": "1"},
        "data_type": "order",
        "data_op": "U",
        "metadata": {"eid": EID, "occurred_at": "2016-03-15T23:47:15Z", "parent_eids": [EID]},
    },
    {
        "data": {"order_number": "1"},
        "data_type": "order",
        "data_op": "X",
        "metadata": {"eid": EID, "occurred_at": "2016-03-15T23:47:15Z"},
    },
    {
        "data": {"order_number": "1"},
        "data_op": "C",
        "metadata": {"eid": EID, "occurred_at": "2016-03-15T23:47:15Z"},
    },
    [],
    "text",
]


def _same_verdict(schema: dict[str, Any], instance: Any) -> None:
    expected = Draft4Validator(schema, format_checker=_formats).is_valid(instance)
    error = EventValidator(schema).first_error(instance)
    assert (error is None) == expected, f"{schema} on {instance!r}: jsonschema {expected}, {error}"
    if error is not None:
        assert error.startswith("#/")


@pytest.mark.parametrize(("schema", "instances"), CASES, ids=[str(c[0])[:60] for c in CASES])
def test_keywords_agree_with_jsonschema(schema: dict[str, Any], instances: list[Any]) -> None:
    for instance in instances:
        _same_verdict(schema, instance)


@pytest.mark.parametrize("category", ["business", "data", "undefined"])
@pytest.mark.parametrize("mode", ["forward", "compatible", "none"])
@pytest.mark.parametrize("cleanup_policy", ["delete", "compact"])
def test_effective_schemas_agree_with_jsonschema(
    category: str, mode: str, cleanup_policy: str
) -> None:
    schema = effective_schema.build(category, USER_SCHEMA, mode, cleanup_policy)
    for event in EVENTS:
        _same_verdict(schema, event)


def test_draft_04_whatever_the_schema_says() -> None:
    # Draft 06 would read exclusiveMinimum as a number; draft 04 needs a boolean beside minimum.
    schema = {"$schema": "http://json-schema.org/draft-06/schema#", "type": "integer", "minimum": 5}
    assert EventValidator(schema).first_error(5) is None
    assert EventValidator(schema).first_error(1.0) is not None  # not an integer in draft 04


def test_error_names_the_path() -> None:
    schema = effective_schema.build("business", USER_SCHEMA, "forward", "delete")
    error = EventValidator(schema).first_error(EVENTS[1])
    assert error is not None
    assert error.startswith("#/metadata/eid: must match pattern")
