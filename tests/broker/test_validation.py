"""Both compiled validators (jsonschema-rs, fastjsonschema) give jsonschema's Draft4Validator's
verdict.

Publishing trusts them for speed; this is the evidence that they are the
draft-04 semantics Nakadi's clients expect, keyword by keyword, on the
effective schemas the broker builds, and that the Rust validator, which alone
accepts an event, accepts exactly what fastjsonschema accepts.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from fastjsonschema import JsonSchemaValueException
from jsonschema import FormatChecker
from jsonschema.validators import Draft4Validator

from changebroker.broker.event_types import effective_schema
from changebroker.broker.event_types.effective_schema import (
    EventValidator,
    is_calendar_date_time,
    is_date_time,
)

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
    # Formats of later drafts the Rust validator would check: not checked in draft 04.
    ({"format": "date"}, ["2026-11-22", "not a date"]),
    ({"format": "time"}, ["10:00:00Z", "not a time"]),
    ({"format": "idn-email"}, ["not an email"]),
]

# Formats checked by fastjsonschema's expressions (in both validators): jsonschema's own
# checks agree on these values, not on every edge (it takes "a@b" as an email).
FORMAT_CASES: list[tuple[dict[str, Any], list[Any]]] = [
    ({"format": "email"}, ["a@b.com", "ab.com", "", 1]),
    ({"format": "hostname"}, ["example.com", "xn--bcher-kva.example", "a.b.c"]),
    ({"format": "ipv4"}, ["1.2.3.4", "256.1.1.1", "1.2.3", "01.2.3.4", "1.2.3.4 "]),
    ({"format": "ipv6"}, ["::1", "2001:db8::1", "::ffff:1.2.3.4", "1::2::3", "12345::", ""]),
    ({"format": "uri"}, ["http://example.com", "urn:isbn:123", "mailto:a@b.c", "a:b"]),
    ({"format": "regex"}, ["^a+$", "(?P<name>a)", "["]),
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


def _same_verdict(schema: dict[str, Any], instance: Any, formats: FormatChecker = _formats) -> None:
    expected = Draft4Validator(schema, format_checker=formats).is_valid(instance)
    validator = EventValidator(schema)
    error = validator.first_error(instance)
    assert (error is None) == expected, f"{schema} on {instance!r}: jsonschema {expected}, {error}"
    assert validator.accepts(instance) == expected, f"{schema} on {instance!r}: jsonschema-rs"
    try:
        validator.validate(instance)
    except JsonSchemaValueException:
        assert not expected, f"{schema} on {instance!r}: fastjsonschema refuses"
    else:
        assert expected, f"{schema} on {instance!r}: fastjsonschema accepts"
    if error is not None:
        assert error.startswith("#/")


@pytest.mark.parametrize(("schema", "instances"), CASES, ids=[str(c[0])[:60] for c in CASES])
def test_keywords_agree_with_jsonschema(schema: dict[str, Any], instances: list[Any]) -> None:
    for instance in instances:
        _same_verdict(schema, instance)


@pytest.mark.parametrize(
    ("schema", "instances"), FORMAT_CASES, ids=[c[0]["format"] for c in FORMAT_CASES]
)
def test_formats_agree_with_jsonschema(schema: dict[str, Any], instances: list[Any]) -> None:
    for instance in instances:
        _same_verdict(schema, instance, Draft4Validator.FORMAT_CHECKER)


def test_formats_are_fastjsonschemas_where_jsonschema_differs() -> None:
    # Publishing accepted these before the Rust validator came; it must not start refusing.
    for format_, value, valid in [
        ("email", "a@b", False),
        ("email", "ü@b.de", True),
        ("email", "a b@c.com", True),
        ("uri", "http://é.com", True),
        ("hostname", "ex_ample.com", False),
    ]:
        validator = EventValidator({"format": format_})
        assert validator.accepts(value) == valid, (format_, value)
        assert (validator.first_error(value) is None) == valid, (format_, value)


def test_python_only_patterns_are_judged_by_fastjsonschema() -> None:
    # The Rust regex engine refuses "(?P<name>...)": that schema's events go the slower way.
    validator = EventValidator({"pattern": "^(?P<sku>[a-z]+)$"})
    assert not validator.accepts("abc")
    assert validator.first_error("abc") is None
    assert validator.first_error("ABC") == "#/: must match pattern ^(?P<sku>[a-z]+)$"


def test_strings_rust_cannot_hold() -> None:
    # A lone surrogate (JSON allows the escape) cannot become a Rust string: fastjsonschema
    # judges the event.
    validator = EventValidator({"properties": {"a": {"type": "string", "maxLength": 1}}})
    assert validator.first_error({"a": "\ud800"}) is None
    assert (
        validator.first_error({"a": "\ud800\ud800"})
        == "#/a: must be shorter than or equal to 1 characters"
    )


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


def test_date_time_shortcut_gives_the_calendars_verdict() -> None:
    # The grammar-only shortcut must accept nothing the calendar check refuses: leap days,
    # 24:00, leap seconds, year 0000, non-ASCII digits, a trailing newline.
    pieces = [
        ["0000", "0001", "2000", "2023", "2024", "٢٠٢٦"],
        ["-"],
        ["00", "01", "02", "12", "13"],
        ["-"],
        ["00", "01", "28", "29", "30", "31"],
        ["T", "t", " "],
        ["00", "23", "24"],
        [":"],
        ["59", "60"],
        [":"],
        ["00", "60"],
        ["", ".5", "."],
        ["Z", "z", "+23:59", "-24:00", "+01:60", "+0100", "", "Z\n"],
    ]
    for parts in itertools.product(*pieces):
        value = "".join(parts)
        assert is_date_time(value) == is_calendar_date_time(value), value
