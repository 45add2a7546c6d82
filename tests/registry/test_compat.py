"""The compatibility engine: the matrix in every mode, transitive history, Nakadi levels."""

from __future__ import annotations

import json
from typing import Any

import pytest

from changebroker.registry.compat import (
    Evolution,
    Level,
    Mode,
    SchemaError,
    Violation,
    avro_violations,
    check,
    json_schema_violations,
    nakadi_evolution,
    next_version,
    share_subtrees,
)
from changebroker.registry.compat.nakadi import NakadiMode
from tests.registry.compat_cases import AVRO_CASES, JSON_CASES, Case, f, obj, record

_BACKWARD = {Mode.BACKWARD, Mode.BACKWARD_TRANSITIVE, Mode.FULL, Mode.FULL_TRANSITIVE}
_FORWARD = {Mode.FORWARD, Mode.FORWARD_TRANSITIVE, Mode.FULL, Mode.FULL_TRANSITIVE}


def expected(case: Case, mode: Mode) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    if mode in _BACKWARD:
        found |= set(case.backward)
    if mode in _FORWARD:
        found |= set(case.forward)
    return found


def verdict(violations: list[Violation]) -> set[tuple[str, str]]:
    assert all(v.message and v.message[0].islower() for v in violations), violations
    return {(v.rule, v.path) for v in violations}


def test_matrix_is_big_enough() -> None:
    assert len(JSON_CASES) >= 60
    assert len(AVRO_CASES) >= 30
    names = [c.name for c in JSON_CASES + AVRO_CASES]
    assert len(names) == len(set(names)), "case names must be unique"


@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("case", JSON_CASES, ids=lambda c: c.name)
def test_json_schema_matrix(case: Case, mode: Mode) -> None:
    found = check(mode, case.new, [case.old], "JSON")
    assert verdict(found) == expected(case, mode)


@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("case", JSON_CASES, ids=lambda c: c.name)
def test_json_schema_matrix_when_both_schemas_share_their_equal_parts(
    case: Case, mode: Mode
) -> None:
    # As the registry loads a history: the same text is one object, on both sides here, so
    # each unchanged-part shortcut meets the very object it is compared with, $refs included.
    old, new = share_subtrees([case.old, case.new])
    assert verdict(check(mode, new, [old], "JSON")) == expected(case, mode)


def test_a_subschema_unchanged_from_one_version_is_still_compared_with_the_others() -> None:
    # The new {"const": 1} is unchanged from the latest version, equal in Python to the
    # earlier {"const": true}, and not the same schema: what the check learnt about the
    # first pair says nothing about the second.
    earlier, latest = {"properties": {"a": {"const": True}}}, {"properties": {"a": {"const": 1}}}
    found = check(
        Mode.BACKWARD_TRANSITIVE, {"properties": {"a": {"const": 1}}}, [earlier, latest], "JSON"
    )
    assert verdict(found) == {("enum-value-removed", "#/properties/a/const")}
    assert all("earlier schema #1" in violation.message for violation in found)


def test_a_reference_into_a_list_by_a_digit_int_refuses_is_no_index() -> None:
    # "²".isdigit() is true and int("²") fails: the reference resolves to nothing, as any
    # other token that is not an index of the list.
    def schemas(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
        ref = {"$ref": f"#/definitions/options/{token}"}
        old = {"definitions": {"options": [{"type": "string"}]}, "properties": {"a": ref}}
        new = {"definitions": {"options": [{"type": "integer"}]}, "properties": {"a": ref}}
        return new, old

    for mode in Mode:
        new, old = schemas("\u00b2")
        other_new, other_old = schemas("x")
        assert verdict(check(mode, new, [old], "JSON")) == verdict(
            check(mode, other_new, [other_old], "JSON")
        )


def test_shared_subtrees_are_one_object_and_the_same_text() -> None:
    money = {"type": "number", "minimum": 0}
    versions = [
        {"properties": {"price": dict(money), "flags": [True, 1, 1.0]}},
        {"properties": {"price": dict(money), "zeros": [-0.0, 0.0]}, "required": ["price"]},
    ]
    first, second = share_subtrees(versions)
    assert first["properties"]["price"] is second["properties"]["price"]
    assert [json.dumps(v) for v in (first, second)] == [json.dumps(v) for v in versions]
    # Equal in Python, yet other texts: never one object.
    assert [type(flag) for flag in first["properties"]["flags"]] == [bool, int, float]
    assert [repr(zero) for zero in second["properties"]["zeros"]] == ["-0.0", "0.0"]
    assert share_subtrees([{"a": [1]}, {"a": [True]}])[1]["a"] == [True]
    assert type(share_subtrees([{"a": [1]}, {"a": [True]}])[1]["a"][0]) is bool


@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("case", AVRO_CASES, ids=lambda c: c.name)
def test_avro_matrix(case: Case, mode: Mode) -> None:
    found = check(mode, case.new, [case.old], "AVRO")
    assert verdict(found) == expected(case, mode)


@pytest.mark.parametrize("case", JSON_CASES, ids=lambda c: c.name)
def test_json_schema_directions(case: Case) -> None:
    """The reader/writer function itself, without the mode layer."""
    assert verdict(json_schema_violations(case.new, case.old)) == set(case.backward)
    assert verdict(json_schema_violations(case.old, case.new)) == set(case.forward)


@pytest.mark.parametrize("case", AVRO_CASES, ids=lambda c: c.name)
def test_avro_directions(case: Case) -> None:
    assert verdict(avro_violations(case.new, case.old)) == set(case.backward)
    assert verdict(avro_violations(case.old, case.new)) == set(case.forward)


# History (oldest first) where only the oldest schema conflicts with the new one.
TRANSITIVE: list[tuple[str, Any, list[Any], Any, dict[Mode, set[tuple[str, str]]]]] = [
    (
        "JSON",
        "bound tightened two versions ago",
        [{"type": "string", "maxLength": 10}, {"type": "string", "maxLength": 5}],
        {"type": "string", "maxLength": 5},
        {
            Mode.BACKWARD_TRANSITIVE: {("max-length-tightened", "#/maxLength")},
            Mode.FULL_TRANSITIVE: {("max-length-tightened", "#/maxLength")},
        },
    ),
    (
        "AVRO",
        "field lost its default two versions ago",
        [
            record("R", f("a", "int"), f("b", "string")),
            record("R", f("a", "int"), f("b", "string", default="")),
        ],
        record("R", f("a", "int")),
        {
            Mode.FORWARD_TRANSITIVE: {("field-without-default", "#/fields/b")},
            Mode.FULL_TRANSITIVE: {("field-without-default", "#/fields/b")},
        },
    ),
]


@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize(
    ("fmt", "name", "history", "new", "answers"), TRANSITIVE, ids=[t[1] for t in TRANSITIVE]
)
def test_transitive_modes_check_the_whole_history(
    fmt: Any, name: str, history: list[Any], new: Any, answers: dict[Mode, Any], mode: Mode
) -> None:
    found = check(mode, new, history, fmt)
    assert verdict(found) == answers.get(mode, set())
    for violation in found:
        assert "earlier schema #1" in violation.message
    *shared_history, shared_new = share_subtrees([*history, new])
    assert check(mode, shared_new, shared_history, fmt) == found


@pytest.mark.parametrize("mode", list(Mode))
def test_first_schema_is_always_compatible(mode: Mode) -> None:
    assert check(mode, {"type": "string"}, [], "JSON") == []


def test_full_explains_both_directions() -> None:
    found = check(Mode.FULL, {"type": "string"}, [{"type": "integer"}], "JSON")
    assert [
        v.message.endswith("(new schema reading data of the latest schema)") for v in found
    ] == [
        True,
        False,
    ]
    assert found[1].message.endswith("(the latest schema reading data of the new schema)")


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="use JSON or AVRO"):
        check(Mode.BACKWARD, "x", ["y"], "PB")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("schema", "complaint"),
    [
        ({"type": "record", "fields": []}, "needs a 'name'"),
        ({"type": "record", "name": "R"}, "needs 'fields'"),
        ({"type": "enum", "name": "E", "symbols": ["A", "A"]}, "symbol twice"),
        ({"type": "fixed", "name": "F"}, "'size'"),
        ("Missing", "unknown Avro type"),
        ("{not json", "not valid JSON"),
        (["null", ["int"]], "cannot directly contain another union"),
        ({"type": "array"}, "needs 'items'"),
        ({"type": "fixed", "name": "F", "size": 1, "aliases": "G"}, "aliases of F"),
        (
            {
                "type": "record",
                "name": "R",
                "fields": [{"name": "a", "type": "int", "aliases": "b"}],
            },
            "aliases of field 'a'",
        ),
        (
            {
                "type": "record",
                "name": "R",
                "fields": [{"name": "a", "type": "int", "default": "x"}],
            },
            "default of field 'a'",
        ),
        (
            {
                "type": "record",
                "name": "R",
                "fields": [{"name": "a", "type": ["string", "null"], "default": 3}],
            },
            "is not a string or null",
        ),
        (["int", "int"], "already has a int"),
        ([{"type": "array", "items": "int"}, {"type": "array", "items": "long"}], "has a array"),
        ([{"type": "map", "values": "int"}, {"type": "map", "values": "int"}], "has a map"),
        (record("R", f("a", "int", default=2**31)), "at #/fields/0/default"),
        (record("R", f("a", "int", default=-(2**31) - 1)), "not a int"),
        (record("R", f("a", "long", default=2**63)), "not a long"),
        (record("R", f("a", {"type": {"type": "int"}})), "at #/fields/0/type/type"),
        (record("R", f("a", {"type": ["null", "int"]})), "at #/fields/0/type/type"),
        (record("R", f("a", {"type": "R"})), 'not "R"'),
        (record("R", f("a", "int", order="sideways")), "at #/fields/0/order"),
        (record("R", f("a", "bytes", default="€")), "not a bytes"),
        (record("R", f("a", {"type": "fixed", "name": "F", "size": 2}, default="a")), "not a F"),
    ],
)
def test_malformed_avro_says_what_is_wrong(schema: Any, complaint: str) -> None:
    with pytest.raises(SchemaError, match=complaint):
        avro_violations(schema, "int")


OLD = obj({"a": {"type": "string"}, "n": {"type": "number"}, "e": {"enum": ["x", "y"]}})

NAKADI: list[tuple[str, dict[str, Any], dict[str, Level], set[str]]] = [
    ("identical", OLD, dict.fromkeys(("compatible", "forward", "none"), Level.NONE), set()),
    (
        "title and description",
        {**OLD, "title": "Order", "description": "an order"},
        dict.fromkeys(("compatible", "forward", "none"), Level.PATCH),
        set(),
    ),
    (
        "optional property added",
        obj({**OLD["properties"], "b": {"type": "string"}}),
        dict.fromkeys(("compatible", "forward", "none"), Level.MINOR),
        set(),
    ),
    (
        "required property added",
        obj({**OLD["properties"], "b": {"type": "string"}}, ["b"]),
        {"compatible": Level.MAJOR, "forward": Level.MINOR, "none": Level.MAJOR},
        {"required-added"},
    ),
    (
        "number narrowed to integer",
        obj({**OLD["properties"], "n": {"type": "integer"}}),
        {"compatible": Level.MAJOR, "forward": Level.MINOR, "none": Level.MAJOR},
        {"type-narrowed"},
    ),
    (
        "enum value removed",
        obj({**OLD["properties"], "e": {"enum": ["x"]}}),
        {"compatible": Level.MAJOR, "forward": Level.MINOR, "none": Level.MAJOR},
        {"enum-value-removed"},
    ),
    (
        "enum value added",
        obj({**OLD["properties"], "e": {"enum": ["x", "y", "z"]}}),
        dict.fromkeys(("compatible", "forward", "none"), Level.MAJOR),
        {"enum-value-removed"},
    ),
    (
        "string widened to any type",
        obj({**OLD["properties"], "a": {}}),
        dict.fromkeys(("compatible", "forward", "none"), Level.MAJOR),
        {"type-narrowed"},
    ),
    (
        "property removed",
        obj({"a": {"type": "string"}, "n": {"type": "number"}}),
        dict.fromkeys(("compatible", "forward", "none"), Level.MAJOR),
        {"property-rejected", "property-constrained"},
    ),
    (
        "additionalProperties turned into a schema",
        {**OLD, "additionalProperties": {"type": "string"}},
        {"compatible": Level.MAJOR, "forward": Level.MINOR, "none": Level.MINOR},
        {"keyword-not-supported"},
    ),
]


@pytest.mark.parametrize("mode", ["compatible", "forward", "none"])
@pytest.mark.parametrize(("name", "new", "levels", "rules"), NAKADI, ids=[n[0] for n in NAKADI])
def test_nakadi_levels(
    name: str, new: dict[str, Any], levels: dict[str, Level], rules: set[str], mode: Any
) -> None:
    evolution = nakadi_evolution(mode, OLD, new)
    assert evolution.level == levels[mode]
    rejected = mode != "none" and levels[mode] is Level.MAJOR
    assert bool(evolution.violations) == rejected
    if rejected:
        assert {v.rule for v in evolution.violations} <= rules
        assert {v.rule for v in evolution.violations} & rules


def _bridge_schema(*pg_types: str, added: bool = False) -> dict[str, Any]:
    """A row schema as the bridge writes one, each column's Postgres type in the annotation
    keyword ``x-pg-type`` (bridge/values.py); ``()``: as written before the keyword.
    ``added``: with a column more (typed ``text`` when the others are)."""
    columns: dict[str, Any] = {
        "id": {"type": "integer", "description": "the key"},
        "total": {"type": ["string", "null"]},
        "doc": {},
    }
    if added:
        columns["note"] = {"type": ["string", "null"]}
    if pg_types:
        for (name, column), pg_type in zip(columns.items(), [*pg_types, "text"], strict=False):
            columns[name] = {**column, "x-pg-type": pg_type}
    return obj(columns, ["id"])


NAKADI_MODES: tuple[NakadiMode, ...] = ("compatible", "forward", "none")
PG_TYPES = ("integer", "numeric(12,2)", "jsonb")


@pytest.mark.parametrize(
    ("old_types", "new_types", "added", "level"),
    [
        ((), PG_TYPES, False, Level.PATCH),
        (PG_TYPES, ("bigint", "numeric(14,4)", "json"), False, Level.PATCH),
        (PG_TYPES, (), False, Level.PATCH),
        (PG_TYPES, PG_TYPES, True, Level.MINOR),
    ],
    ids=["added", "retyped", "removed", "beside a new column"],
)
def test_the_postgres_type_keyword_is_an_annotation(
    old_types: tuple[str, ...], new_types: tuple[str, ...], added: bool, level: Level
) -> None:
    """A change of ``x-pg-type`` alone is a PATCH, as a description's is, and its presence
    changes no verdict: every mode judges the schemas as it judges them without it."""
    old, new = _bridge_schema(*old_types), _bridge_schema(*new_types, added=added)
    for nakadi_mode in NAKADI_MODES:
        assert nakadi_evolution(nakadi_mode, old, new) == Evolution(level, [])
    for mode in Mode:
        found = verdict(check(mode, new, [old], "JSON"))
        assert found == verdict(
            check(mode, _bridge_schema(added=added), [_bridge_schema()], "JSON")
        )
        assert found == set() or added


def test_nakadi_compatible_mode_names_the_unsupported_keyword() -> None:
    new = {**OLD, "properties": {**OLD["properties"], "m": {"type": "object", "not": {}}}}
    found = nakadi_evolution("compatible", OLD, new).violations
    assert ("keyword-not-supported", "#/properties/m/not") in {(v.rule, v.path) for v in found}


def test_nakadi_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="compatible, forward or none"):
        nakadi_evolution("strict", OLD, {**OLD, "required": ["a"]})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("current", "level", "after"),
    [
        ("1.0.0", Level.MINOR, "1.1.0"),
        ("1.4.2", Level.PATCH, "1.4.3"),
        ("1.4.2", Level.MAJOR, "2.0.0"),
        ("1.4.2", Level.NONE, "1.4.2"),
    ],
)
def test_next_version(current: str, level: Level, after: str) -> None:
    assert next_version(current, level) == after


def test_next_version_refuses_non_semantic_versions() -> None:
    with pytest.raises(ValueError, match=r"MAJOR\.MINOR\.PATCH"):
        next_version("1.0", Level.MINOR)


def test_evolution_is_a_value() -> None:
    assert Evolution(Level.MINOR, []) == Evolution(Level.MINOR, [])


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def test_too_deep_json_schemas_are_reported_not_crashed() -> None:
    found = json_schema_violations(nested(5000), nested(4999))
    assert [(v.rule, v.path) for v in found] == [("schema-too-deep", "#")]


def test_too_deep_avro_schemas_are_malformed() -> None:
    schema: Any = "int"
    for _ in range(5000):
        schema = {"type": "array", "items": schema}
    with pytest.raises(SchemaError, match="nests too deeply"):
        avro_violations(schema, schema)


def test_avro_defaults_of_every_kind_are_accepted_when_they_fit() -> None:
    point = {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "double"}]}
    fields = [
        {"name": "p", "type": point, "default": {"x": 1}},
        {"name": "c", "type": {"type": "enum", "name": "C", "symbols": ["A"]}, "default": "A"},
        {"name": "xs", "type": {"type": "array", "items": "long"}, "default": [1, 2]},
        {"name": "m", "type": {"type": "map", "values": "boolean"}, "default": {"k": True}},
        {"name": "f", "type": {"type": "fixed", "name": "F", "size": 2}, "default": "\u00ff\u0000"},
        {"name": "u", "type": ["int", "null"], "default": 3},
        {"name": "v", "type": ["null", "int"], "default": 3},  # Avro 1.12: any branch
        {"name": "i", "type": "int", "default": -(2**31), "order": "descending"},
        {"name": "l", "type": "long", "default": 2**63 - 1, "order": "ignore"},
    ]
    schema = {"type": "record", "name": "R", "fields": fields}
    assert avro_violations(schema, {"type": "record", "name": "R", "fields": []}) == []


def test_history_invalid_by_current_rules_is_a_violation_not_a_crash() -> None:
    # Registered before int defaults were held to 32 bits.
    old = {"type": "record", "name": "R", "fields": [f("a", "int", default=2**40)]}
    new = {"type": "record", "name": "R", "fields": [f("a", "int")]}
    found = check(Mode.FULL, new, [old], "AVRO")
    assert [(v.rule, v.path) for v in found] == [("schema-invalid", "#")]
    assert "the latest schema is not a valid schema" in found[0].message
    assert check(Mode.NONE, new, [old], "AVRO") == []


@pytest.mark.parametrize(
    ("reader", "writer"),
    [
        ({"const": True}, {"const": 1}),
        ({"enum": [1]}, {"enum": [1.5]}),
        ({"properties": {"a": {"const": False}}}, {"properties": {"a": {"const": 0}}}),
    ],
)
def test_equal_in_python_is_not_the_same_schema(reader: Any, writer: Any) -> None:
    # true == 1 and 0 == False in Python: the shortcut for unchanged subtrees must not take them
    # for the same schema.
    assert json_schema_violations(reader, writer), (reader, writer)
    assert json_schema_violations(writer, reader), (writer, reader)
