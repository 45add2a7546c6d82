"""The compatibility matrix: schema changes old -> new with the violations each direction has.

``backward`` lists what the new schema, reading data of the old one, trips over;
``forward`` what the old schema, reading data of the new one, trips over. Each
entry is ``(rule, path)``. Every mode's expected answer follows from these two.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Expected = list[tuple[str, str]]


@dataclass(frozen=True)
class Case:
    name: str
    old: Any
    new: Any
    backward: Expected = field(default_factory=list)
    forward: Expected = field(default_factory=list)


def obj(props: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props, **extra}
    if required:
        schema["required"] = required
    return schema


D2020 = "https://json-schema.org/draft/2020-12/schema"
S = {"type": "string"}
I = {"type": "integer"}  # noqa: E741
N = {"type": "number"}

NODE = {
    "type": "object",
    "properties": {"children": {"type": "array", "items": {"$ref": "#/definitions/node"}}},
}

JSON_CASES = [
    Case("identical", obj({"a": S}), obj({"a": S})),
    Case(
        "title and description only",
        obj({"a": S}),
        obj({"a": {**S, "title": "A"}}, description="orders"),
    ),
    Case(
        "optional property added, open model",
        obj({"a": S}),
        obj({"a": S, "b": S}),
        backward=[("property-constrained", "#/properties/b")],
    ),
    Case(
        "optional property added, closed model",
        obj({"a": S}, additionalProperties=False),
        obj({"a": S, "b": S}, additionalProperties=False),
        forward=[("property-rejected", "#/properties/b")],
    ),
    Case(
        "required property added, open model",
        obj({"a": S}),
        obj({"a": S, "b": S}, ["b"]),
        backward=[("property-constrained", "#/properties/b"), ("required-added", "#/required")],
    ),
    Case(
        "optional property removed, open model",
        obj({"a": S, "b": S}),
        obj({"a": S}),
        forward=[("property-constrained", "#/properties/b")],
    ),
    Case(
        "optional property removed, closed model",
        obj({"a": S, "b": S}, additionalProperties=False),
        obj({"a": S}, additionalProperties=False),
        backward=[("property-rejected", "#/properties/b")],
    ),
    Case(
        "property made required",
        obj({"a": S}),
        obj({"a": S}, ["a"]),
        backward=[("required-added", "#/required")],
    ),
    Case(
        "property made optional",
        obj({"a": S}, ["a"]),
        obj({"a": S}),
        forward=[("required-added", "#/required")],
    ),
    Case(
        "integer widened to number",
        obj({"a": I}),
        obj({"a": N}),
        forward=[("type-narrowed", "#/properties/a/type")],
    ),
    Case(
        "number narrowed to integer",
        obj({"a": N}),
        obj({"a": I}),
        backward=[("type-narrowed", "#/properties/a/type")],
    ),
    Case(
        "string changed to integer",
        obj({"a": S}),
        obj({"a": I}),
        backward=[("type-narrowed", "#/properties/a/type")],
        forward=[("type-narrowed", "#/properties/a/type")],
    ),
    Case(
        "null added to the type",
        S,
        {"type": ["string", "null"]},
        forward=[("type-narrowed", "#/type")],
    ),
    Case("type constraint removed", S, {}, forward=[("type-narrowed", "#/type")]),
    Case(
        "enum value added",
        {"enum": ["a", "b"]},
        {"enum": ["a", "b", "c"]},
        forward=[("enum-value-removed", "#/enum")],
    ),
    Case(
        "enum value removed",
        {"enum": ["a", "b", "c"]},
        {"enum": ["a", "b"]},
        backward=[("enum-value-removed", "#/enum")],
    ),
    Case(
        "enum added to a string",
        S,
        {"type": "string", "enum": ["a"]},
        backward=[("enum-added", "#/enum")],
    ),
    Case(
        "const changed",
        {"const": "a"},
        {"const": "b"},
        backward=[("enum-value-removed", "#/const")],
        forward=[("enum-value-removed", "#/const")],
    ),
    Case(
        "minimum raised",
        {"type": "integer", "minimum": 0},
        {"type": "integer", "minimum": 5},
        backward=[("minimum-tightened", "#/minimum")],
    ),
    Case(
        "maximum lowered",
        {"type": "integer", "maximum": 100},
        {"type": "integer", "maximum": 50},
        backward=[("maximum-tightened", "#/maximum")],
    ),
    Case(
        "minimum added",
        N,
        {"type": "number", "minimum": 0},
        backward=[("minimum-tightened", "#/minimum")],
    ),
    Case(
        "inclusive minimum made exclusive (draft 6+)",
        {"type": "number", "minimum": 0},
        {"type": "number", "exclusiveMinimum": 0},
        backward=[("minimum-tightened", "#/exclusiveMinimum")],
    ),
    Case(
        "inclusive minimum made exclusive (draft 4)",
        {"type": "number", "minimum": 0},
        {"type": "number", "minimum": 0, "exclusiveMinimum": True},
        backward=[("minimum-tightened", "#/minimum")],
    ),
    Case(
        "minimum lowered",
        {"type": "number", "minimum": 5},
        {"type": "number", "minimum": 0},
        forward=[("minimum-tightened", "#/minimum")],
    ),
    Case(
        "maxLength lowered",
        {"type": "string", "maxLength": 10},
        {"type": "string", "maxLength": 5},
        backward=[("max-length-tightened", "#/maxLength")],
    ),
    Case(
        "minLength added",
        S,
        {"type": "string", "minLength": 1},
        backward=[("min-length-tightened", "#/minLength")],
    ),
    Case(
        "pattern added",
        S,
        {"type": "string", "pattern": "^[a-z]+$"},
        backward=[("pattern-changed", "#/pattern")],
    ),
    Case(
        "pattern changed",
        {"type": "string", "pattern": "^[a-z]+$"},
        {"type": "string", "pattern": "^[0-9]+$"},
        backward=[("pattern-changed", "#/pattern")],
        forward=[("pattern-changed", "#/pattern")],
    ),
    Case(
        "format added",
        S,
        {"type": "string", "format": "date-time"},
        backward=[("format-changed", "#/format")],
    ),
    Case(
        "multipleOf made coarser",
        {"type": "integer", "multipleOf": 2},
        {"type": "integer", "multipleOf": 4},
        backward=[("multiple-of-changed", "#/multipleOf")],
    ),
    Case(
        "array items widened",
        {"type": "array", "items": I},
        {"type": "array", "items": N},
        forward=[("type-narrowed", "#/items/type")],
    ),
    Case(
        "array items constraint removed",
        {"type": "array", "items": S},
        {"type": "array"},
        forward=[("type-narrowed", "#/items/type")],
    ),
    Case(
        "maxItems lowered",
        {"type": "array", "maxItems": 10},
        {"type": "array", "maxItems": 3},
        backward=[("max-items-tightened", "#/maxItems")],
    ),
    Case(
        "minItems raised",
        {"type": "array", "minItems": 0},
        {"type": "array", "minItems": 1},
        backward=[("min-items-tightened", "#/minItems")],
    ),
    Case(
        "uniqueItems added",
        {"type": "array"},
        {"type": "array", "uniqueItems": True},
        backward=[("unique-items-added", "#/uniqueItems")],
    ),
    Case(
        "tuple position added, no additional items",
        {"type": "array", "items": [S], "additionalItems": False},
        {"type": "array", "items": [S, I], "additionalItems": False},
        forward=[("additional-items-rejected", "#/additionalItems")],
    ),
    Case(
        "content model closed",
        obj({"a": S}),
        obj({"a": S}, additionalProperties=False),
        backward=[("additional-properties-closed", "#/additionalProperties")],
    ),
    Case(
        "content model opened",
        obj({"a": S}, additionalProperties=False),
        obj({"a": S}),
        forward=[("additional-properties-closed", "#/additionalProperties")],
    ),
    Case(
        "additionalProperties true to a schema",
        obj({"a": S}),
        obj({"a": S}, additionalProperties=S),
        backward=[("type-narrowed", "#/additionalProperties/type")],
    ),
    Case(
        "nested property type changed",
        obj({"a": obj({"b": S})}),
        obj({"a": obj({"b": I})}),
        backward=[("type-narrowed", "#/properties/a/properties/b/type")],
        forward=[("type-narrowed", "#/properties/a/properties/b/type")],
    ),
    Case(
        "nested property made required",
        obj({"a": obj({"b": S})}),
        obj({"a": obj({"b": S}, ["b"])}),
        backward=[("required-added", "#/properties/a/required")],
    ),
    Case(
        "$ref inlined",
        {**obj({"price": {"$ref": "#/definitions/money"}}), "definitions": {"money": N}},
        obj({"price": N}),
    ),
    Case(
        "$ref target narrowed",
        {**obj({"price": {"$ref": "#/definitions/money"}}), "definitions": {"money": N}},
        {**obj({"price": {"$ref": "#/definitions/money"}}), "definitions": {"money": I}},
        backward=[("type-narrowed", "#/properties/price/type")],
    ),
    Case(
        "$ref target narrowed beneath a property that reads the same on both sides",
        {
            **obj({"price": obj({"amount": {"$ref": "#/definitions/money"}})}),
            "definitions": {"money": N},
        },
        {
            **obj({"price": obj({"amount": {"$ref": "#/definitions/money"}})}),
            "definitions": {"money": I},
        },
        backward=[("type-narrowed", "#/properties/price/properties/amount/type")],
    ),
    Case(
        "a property's const true is not const 1, though Python finds them equal",
        obj({"flag": {"const": 1}}),
        obj({"flag": {"const": True}}),
        backward=[("enum-value-removed", "#/properties/flag/const")],
        forward=[("enum-value-removed", "#/properties/flag/const")],
    ),
    Case(
        "recursive $ref renamed",
        {"$ref": "#/definitions/node", "definitions": {"node": NODE}},
        {
            "$ref": "#/definitions/tree",
            "definitions": {
                "tree": {
                    "type": "object",
                    "properties": {
                        "children": {"type": "array", "items": {"$ref": "#/definitions/tree"}}
                    },
                }
            },
        },
    ),
    Case(
        "recursive $ref with a required property added",
        {"$ref": "#/definitions/node", "definitions": {"node": NODE}},
        {"$ref": "#/definitions/node", "definitions": {"node": {**NODE, "required": ["children"]}}},
        backward=[("required-added", "#/required")],
    ),
    Case(
        "anyOf branch added",
        {"anyOf": [S]},
        {"anyOf": [S, I]},
        forward=[("type-narrowed", "#/anyOf/0/type")],
    ),
    Case(
        "anyOf branch removed",
        {"anyOf": [S, I]},
        {"anyOf": [S]},
        backward=[("type-narrowed", "#/anyOf/0/type")],
    ),
    Case(
        "disjoint oneOf branch added",
        {"oneOf": [S]},
        {"oneOf": [S, I]},
        forward=[("type-narrowed", "#/oneOf/0/type")],
    ),
    Case(
        "overlapping oneOf replaces a type",
        I,
        {"oneOf": [N, I]},
        backward=[("one-of-ambiguous", "#/oneOf")],
        forward=[("type-narrowed", "#/type")],
    ),
    Case(
        "allOf flattened",
        {"allOf": [obj({"a": S}), {"required": ["a"]}]},
        obj({"a": S}, ["a"]),
    ),
    Case(
        "allOf branch adds a bound",
        S,
        {"allOf": [S, {"maxLength": 5}]},
        backward=[("max-length-tightened", "#/allOf/1/maxLength")],
    ),
    Case(
        "not added that overlaps",
        S,
        {"type": "string", "not": {"enum": [""]}},
        backward=[("not-overlaps", "#/not")],
    ),
    Case("not added that cannot overlap", S, {"type": "string", "not": I}),
    Case(
        "property forbidden, then allowed",
        obj({"a": False}),
        obj({}),
        forward=[("property-constrained", "#/properties/a")],
    ),
    Case(
        "patternProperties added to a closed model",
        {"type": "object", "additionalProperties": False},
        {"type": "object", "patternProperties": {"^x-": S}, "additionalProperties": False},
        forward=[("additional-properties-closed", "#/additionalProperties")],
    ),
    Case(
        "patternProperties schema narrowed",
        {"type": "object", "patternProperties": {"^x-": S}, "additionalProperties": False},
        {
            "type": "object",
            "patternProperties": {"^x-": {"type": "string", "maxLength": 3}},
            "additionalProperties": False,
        },
        backward=[("max-length-tightened", "#/patternProperties/^x-/maxLength")],
    ),
    Case(
        "enum replaced by a covering range",
        {"enum": [1, 2, 3]},
        {"type": "integer", "minimum": 1, "maximum": 3},  # the same three values
    ),
    Case("boolean spelled as an enum", {"type": "boolean"}, {"enum": [True, False]}),
    Case(
        "null removed from the type",
        {"type": ["string", "null"]},
        S,
        backward=[("type-narrowed", "#/type")],
    ),
    Case(
        "string added to the type",
        I,
        {"type": ["integer", "string"]},
        forward=[("type-narrowed", "#/type")],
    ),
    Case(
        "maxProperties added",
        {"type": "object"},
        {"type": "object", "maxProperties": 5},
        backward=[("max-properties-tightened", "#/maxProperties")],
    ),
    Case(
        "dependencies added",
        obj({"a": S, "b": S}),
        obj({"a": S, "b": S}, dependencies={"a": ["b"]}),
        backward=[("dependency-added", "#/dependencies/a")],
    ),
    Case(
        "propertyNames added",
        {"type": "object"},
        {"type": "object", "propertyNames": {"maxLength": 3}},
        backward=[("max-length-tightened", "#/propertyNames/maxLength")],
    ),
    Case(
        "if/then/else added",
        obj({"a": S}),
        {**obj({"a": S}), "if": obj({"a": {"const": "x"}}), "then": {"required": ["a"]}},
        backward=[("conditional-changed", "#/if")],
    ),
    Case(
        "empty schema made an object",
        {},
        {"type": "object"},
        backward=[("type-narrowed", "#/type")],
    ),
    Case(
        "const widened to a string",
        {"const": "a"},
        S,
        forward=[("enum-added", "#/const")],
    ),
    Case(
        "same external $ref",
        {"$ref": "https://example.com/money.json"},
        {"$ref": "https://example.com/money.json"},
    ),
    Case(
        "external $ref replaces a type",
        S,
        {"$ref": "https://example.com/money.json"},
        backward=[("ref-unresolved", "#")],
        forward=[("type-narrowed", "#/type")],
    ),
    Case(
        "description added deep inside",
        obj({"a": obj({"b": S})}),
        obj({"a": obj({"b": {**S, "description": "b"}})}),
    ),
    Case(
        "multipleOf made finer",
        {"type": "number", "multipleOf": 0.5},
        {"type": "number", "multipleOf": 0.25},
        forward=[("multiple-of-changed", "#/multipleOf")],
    ),
    Case(
        "nullable type list spelled as anyOf",
        {"type": ["string", "null"]},
        {"anyOf": [S, {"type": "null"}]},
    ),
    Case(
        "enum value outside a new bound",
        {"enum": [1, 5, 10]},
        {"type": "integer", "maximum": 8},
        backward=[("value-rejected", "#")],
        forward=[("enum-added", "#/enum")],
    ),
    Case(
        "anyOf with no branch for the old strings",
        {"type": "string", "maxLength": 10},
        {"anyOf": [{"type": "string", "maxLength": 5}, I]},
        backward=[("union-unmatched", "#/anyOf")],
        forward=[("type-narrowed", "#/type")],
    ),
    Case(
        "property declared but forbidden",
        obj({"a": S}),
        obj({"a": False}),
        backward=[("schema-false", "#/properties/a")],
    ),
    Case(
        "property added within a partially open model",
        obj({"a": S}, additionalProperties=S),
        obj({"a": S, "b": S}, additionalProperties=S),
    ),
    Case(
        "property added narrower than a partially open model",
        obj({"a": S}, additionalProperties=S),
        obj({"a": S, "b": {"type": "string", "maxLength": 5}}, additionalProperties=S),
        backward=[("max-length-tightened", "#/properties/b/maxLength")],
    ),
    Case(
        "closed model opened while adding a property",
        obj({"a": S}, additionalProperties=False),
        obj({"a": S, "b": S}),
        forward=[
            ("property-rejected", "#/properties/b"),
            ("additional-properties-closed", "#/additionalProperties"),
        ],
    ),
    Case(
        "const true is not const 1",
        {"const": 1},
        {"const": True},
        backward=[("enum-value-removed", "#/const")],
        forward=[("enum-value-removed", "#/const")],
    ),
    Case(
        "dependency on a property named like an annotation",
        {"type": "object"},
        {"type": "object", "dependencies": {"title": ["x"]}},
        backward=[("dependency-added", "#/dependencies/title")],
    ),
    Case(
        "exclusiveMaximum lowered below maximum",
        {"type": "number", "maximum": 10},
        {"type": "number", "exclusiveMaximum": 10},
        backward=[("maximum-tightened", "#/exclusiveMaximum")],
    ),
    Case(
        "unevaluatedProperties kept while a property is added",
        {"$schema": D2020, "properties": {"a": {}}, "unevaluatedProperties": False},
        {"$schema": D2020, "properties": {"a": {}, "b": {}}, "unevaluatedProperties": False},
        forward=[("property-rejected", "#/properties/b")],
    ),
    Case(
        "fractional multipleOf made finer",
        {"type": "number", "multipleOf": 0.3},
        {"type": "number", "multipleOf": 0.1},
        backward=[("multiple-of-changed", "#/multipleOf")],  # 0.6 / 0.1 is 5.999... in floats
        forward=[("multiple-of-changed", "#/multipleOf")],
    ),
    Case(
        "prefixItems is no keyword before draft 2020-12",
        {"type": "array", "prefixItems": [S]},
        {"type": "array", "items": [S]},
        backward=[("type-narrowed", "#/items/0/type")],
    ),
    Case(
        "not of a value the writer never allows",
        {"not": {"const": "a"}},
        I,
        backward=[("type-narrowed", "#/type")],
    ),
]


def record(name: str, *fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def f(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


COLOR = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}
LIST = record("Node", f("value", "int"), f("next", ["null", "Node"], default=None))

AVRO_CASES = [
    Case("identical record", record("R", f("a", "int")), record("R", f("a", "int"))),
    Case(
        "field added with default",
        record("R", f("a", "int")),
        record("R", f("a", "int"), f("b", "string", default="")),
    ),
    Case(
        "field added without default",
        record("R", f("a", "int")),
        record("R", f("a", "int"), f("b", "string")),
        backward=[("field-without-default", "#/fields/b")],
    ),
    Case(
        "field with default removed",
        record("R", f("a", "int"), f("b", "string", default="")),
        record("R", f("a", "int")),
    ),
    Case(
        "field without default removed",
        record("R", f("a", "int"), f("b", "string")),
        record("R", f("a", "int")),
        forward=[("field-without-default", "#/fields/b")],
    ),
    Case(
        "int promoted to long",
        record("R", f("a", "int")),
        record("R", f("a", "long")),
        forward=[("type-mismatch", "#/fields/a/type")],
    ),
    Case(
        "int promoted to float",
        record("R", f("a", "int")),
        record("R", f("a", "float")),
        forward=[("type-mismatch", "#/fields/a/type")],
    ),
    Case(
        "long promoted to double",
        record("R", f("a", "long")),
        record("R", f("a", "double")),
        forward=[("type-mismatch", "#/fields/a/type")],
    ),
    Case(
        "float promoted to double",
        record("R", f("a", "float")),
        record("R", f("a", "double")),
        forward=[("type-mismatch", "#/fields/a/type")],
    ),
    Case(
        "double demoted to float",
        record("R", f("a", "double")),
        record("R", f("a", "float")),
        backward=[("type-mismatch", "#/fields/a/type")],
    ),
    Case(
        "int changed to string",
        record("R", f("a", "int")),
        record("R", f("a", "string")),
        backward=[("type-mismatch", "#/fields/a/type")],
        forward=[("type-mismatch", "#/fields/a/type")],
    ),
    Case("string changed to bytes", record("R", f("a", "string")), record("R", f("a", "bytes"))),
    Case(
        "enum symbol added",
        record("R", f("c", COLOR)),
        record("R", f("c", {**COLOR, "symbols": ["RED", "GREEN", "BLUE"]})),
        forward=[("enum-symbol-missing", "#/fields/c/type/symbols")],
    ),
    Case(
        "enum symbol removed",
        record("R", f("c", COLOR)),
        record("R", f("c", {**COLOR, "symbols": ["RED"]})),
        backward=[("enum-symbol-missing", "#/fields/c/type/symbols")],
    ),
    Case(
        "enum symbol removed, reader has a default",
        record("R", f("c", COLOR)),
        record("R", f("c", {**COLOR, "symbols": ["RED"], "default": "RED"})),
    ),
    Case(
        "enum renamed",
        record("R", f("c", COLOR)),
        record("R", f("c", {**COLOR, "name": "Colour"})),
        backward=[("name-mismatch", "#/fields/c/type/name")],
        forward=[("name-mismatch", "#/fields/c/type/name")],
    ),
    Case(
        "record renamed with an alias",
        record("R", f("a", "int")),
        record("S", f("a", "int"), aliases=["R"]),
        forward=[("name-mismatch", "#/name")],
    ),
    Case(
        "field renamed with an alias",
        record("R", f("a", "int")),
        record("R", f("b", "int", aliases=["a"])),
        forward=[("field-without-default", "#/fields/a")],
    ),
    Case(
        "field made nullable",
        record("R", f("a", "string")),
        record("R", f("a", ["null", "string"], default=None)),
        forward=[("type-mismatch", "#/fields/a/type/0")],
    ),
    Case(
        "union branch added",
        record("R", f("a", ["null", "string"])),
        record("R", f("a", ["null", "string", "int"])),
        forward=[("union-branch-missing", "#/fields/a/type")],
    ),
    Case(
        "union branch removed",
        record("R", f("a", ["null", "string", "int"])),
        record("R", f("a", ["null", "string"])),
        backward=[("union-branch-missing", "#/fields/a/type")],
    ),
    Case(
        "union branch promoted",
        record("R", f("a", ["null", "int"])),
        record("R", f("a", ["null", "long"])),
        forward=[("union-branch-missing", "#/fields/a/type")],
    ),
    Case(
        "array items promoted",
        record("R", f("xs", {"type": "array", "items": "int"})),
        record("R", f("xs", {"type": "array", "items": "long"})),
        forward=[("type-mismatch", "#/fields/xs/type/items")],
    ),
    Case(
        "map values changed",
        record("R", f("m", {"type": "map", "values": "string"})),
        record("R", f("m", {"type": "map", "values": "int"})),
        backward=[("type-mismatch", "#/fields/m/type/values")],
        forward=[("type-mismatch", "#/fields/m/type/values")],
    ),
    Case(
        "fixed size changed",
        record("R", f("h", {"type": "fixed", "name": "Hash", "size": 16})),
        record("R", f("h", {"type": "fixed", "name": "Hash", "size": 32})),
        backward=[("fixed-size-changed", "#/fields/h/type/size")],
        forward=[("fixed-size-changed", "#/fields/h/type/size")],
    ),
    Case(
        "fixed renamed",
        record("R", f("h", {"type": "fixed", "name": "Hash", "size": 16})),
        record("R", f("h", {"type": "fixed", "name": "Digest", "size": 16})),
        backward=[("name-mismatch", "#/fields/h/type/name")],
        forward=[("name-mismatch", "#/fields/h/type/name")],
    ),
    Case(
        "nested record gains a defaulted field",
        record("R", f("n", record("Inner", f("x", "int")))),
        record("R", f("n", record("Inner", f("x", "int"), f("y", "int", default=0)))),
    ),
    Case(
        "nested record field changes type",
        record("R", f("n", record("Inner", f("x", "string")))),
        record("R", f("n", record("Inner", f("x", "int")))),
        backward=[("type-mismatch", "#/fields/n/type/fields/x/type")],
        forward=[("type-mismatch", "#/fields/n/type/fields/x/type")],
    ),
    Case("recursive list unchanged", LIST, LIST),
    Case(
        "recursive list gains a defaulted field",
        LIST,
        record(
            "Node",
            f("value", "int"),
            f("next", ["null", "Node"], default=None),
            f("label", "string", default=""),
        ),
    ),
    Case(
        "record moved to another namespace",
        record("R", f("a", "int"), namespace="a.b"),
        record("R", f("a", "int"), namespace="c.d"),
    ),
    Case("top-level int promoted to long", "int", "long", forward=[("type-mismatch", "#")]),
    Case(
        "record replaced by a primitive",
        record("R", f("a", "int")),
        "string",
        backward=[("type-mismatch", "#")],
        forward=[("type-mismatch", "#")],
    ),
    Case(
        "nullable field added with a null default",
        record("R", f("a", "int")),
        record("R", f("a", "int"), f("c", ["null", "string"], default=None)),
    ),
    Case("schema given as JSON text", '"string"', '{"type": "string"}'),
    Case(
        "alias without a namespace is qualified by the reader's",
        record("A", f("a", "int"), namespace="w"),
        record("B", f("a", "int"), namespace="r", aliases=["A"]),
        backward=[("name-mismatch", "#/name")],
        forward=[("name-mismatch", "#/name")],
    ),
    Case(
        "alias naming the writer's full name",
        record("A", f("a", "int"), namespace="w"),
        record("B", f("a", "int"), namespace="r", aliases=["w.A"]),
        forward=[("name-mismatch", "#/name")],
    ),
    Case(
        "fixed read through the union branch of its size",
        {"type": "fixed", "name": "w.F", "size": 8},
        [{"type": "fixed", "name": "a.F", "size": 4}, {"type": "fixed", "name": "b.F", "size": 8}],
        forward=[("fixed-size-changed", "#/0/size")],
    ),
    Case(
        "reader field matching two writer fields",
        record("R", f("a", "int"), f("c", "int")),
        record("R", f("b", "int", aliases=["a", "c"])),
        backward=[("field-ambiguous", "#/fields/b")],
        forward=[("field-without-default", "#/fields/a"), ("field-without-default", "#/fields/c")],
    ),
]
