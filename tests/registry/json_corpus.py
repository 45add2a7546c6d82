"""A seeded corpus of JSON Schema pairs (reader, writer) for the soundness check by sampling.

Each generated pair is a random schema and a copy changed by one or two edits of the kinds
schema authors make (bounds moved, properties and requirements added or dropped, types
widened or narrowed, enums grown or shrunk, content models opened or closed, unions
added); both directions are checked. The matrix cases (compat_cases) are added as they are.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.registry.compat_cases import JSON_CASES

SEED = 20
GENERATED = 180  # each gives two pairs, one per direction


@dataclass(frozen=True)
class Pair:
    name: str
    reader: Any
    writer: Any


_PROPERTY_NAMES = ["id", "name", "price", "tags", "meta", "kind"]


class _Generator:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def schema(self, depth: int = 0) -> dict[str, Any]:
        rng = self.rng
        kinds = ["string", "integer", "number", "boolean", "null", "enum"]
        if depth < 2:
            kinds += ["object", "object", "array", "union"]
        kind = rng.choice(kinds)
        if kind == "string":
            schema: dict[str, Any] = {"type": "string"}
            if rng.random() < 0.4:
                schema["minLength"] = rng.randint(0, 3)
            if rng.random() < 0.4:
                schema["maxLength"] = rng.randint(3, 8)
            if rng.random() < 0.15:
                schema["pattern"] = rng.choice(["^[a-z]+$", "^[0-9]*$", "x"])
            if rng.random() < 0.1:
                schema["format"] = "date"
            return schema
        if kind in ("integer", "number"):
            schema = {"type": kind}
            if rng.random() < 0.4:
                schema["minimum"] = rng.choice([-10, 0, 1, 2.5])
            if rng.random() < 0.4:
                schema["maximum"] = rng.choice([10, 100, 7.5])
            if rng.random() < 0.15:
                schema["exclusiveMinimum"] = rng.choice([-5, 0])
            if rng.random() < 0.15:
                schema["multipleOf"] = rng.choice([2, 5, 0.5])
            return schema
        if kind in ("boolean", "null"):
            return {"type": kind}
        if kind == "enum":
            pool: list[Any] = ["a", "b", "c", 1, 2, None, True]
            return {"enum": rng.sample(pool, rng.randint(1, 4))}
        if kind == "array":
            schema = {"type": "array", "items": self.schema(depth + 1)}
            if rng.random() < 0.3:
                schema["minItems"] = rng.randint(0, 2)
            if rng.random() < 0.3:
                schema["maxItems"] = rng.randint(2, 5)
            if rng.random() < 0.15:
                schema["uniqueItems"] = True
            return schema
        if kind == "union":
            branches = [self.schema(depth + 1) for _ in range(rng.randint(2, 3))]
            return {rng.choice(["anyOf", "oneOf"]): branches}
        names = rng.sample(_PROPERTY_NAMES, rng.randint(1, 4))
        schema = {"type": "object", "properties": {n: self.schema(depth + 1) for n in names}}
        required = [n for n in names if rng.random() < 0.4]
        if required:
            schema["required"] = required
        if rng.random() < 0.3:
            schema["additionalProperties"] = rng.choice([False, {"type": "string"}])
        if rng.random() < 0.1:
            schema["patternProperties"] = {"^x-": {"type": "integer"}}
        if rng.random() < 0.1:
            schema["minProperties"] = 1
        return schema


Edit = Callable[[random.Random, dict[str, Any]], bool]


def _nodes(schema: Any) -> list[dict[str, Any]]:
    """Every subschema (objects only), the root first."""
    if not isinstance(schema, dict):
        return []
    found = [schema]
    for key in ("items", "additionalProperties", "not"):
        found += _nodes(schema.get(key))
    for key in ("properties", "patternProperties"):
        for child in (schema.get(key) or {}).values():
            found += _nodes(child)
    for key in ("anyOf", "oneOf", "allOf"):
        for child in schema.get(key) or []:
            found += _nodes(child)
    return found


def _with(schema: dict[str, Any], key: str) -> list[dict[str, Any]]:
    return [n for n in _nodes(schema) if key in n]


def _move_bound(rng: random.Random, schema: dict[str, Any]) -> bool:
    keys = ["minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems"]
    candidates = [(n, k) for k in keys for n in _with(schema, k)]
    if not candidates:
        target = rng.choice(_nodes(schema))
        if target.get("type") in ("integer", "number"):
            target[rng.choice(["minimum", "maximum"])] = rng.choice([0, 5, 50])
            return True
        if target.get("type") == "string":
            target[rng.choice(["minLength", "maxLength"])] = rng.randint(1, 5)
            return True
        return False
    node, key = rng.choice(candidates)
    if rng.random() < 0.3:
        del node[key]
    else:
        node[key] = max(0, node[key] + rng.choice([-2, -1, 1, 2]))
    return True


def _toggle_required(rng: random.Random, schema: dict[str, Any]) -> bool:
    objects = _with(schema, "properties")
    if not objects:
        return False
    node = rng.choice(objects)
    name = rng.choice(list(node["properties"]))
    required = list(node.get("required", []))
    if name in required:
        required.remove(name)
    else:
        required.append(name)
    if required:
        node["required"] = required
    else:
        node.pop("required", None)
    return True


def _add_property(rng: random.Random, schema: dict[str, Any]) -> bool:
    objects = _with(schema, "properties")
    if not objects:
        return False
    node = rng.choice(objects)
    name = rng.choice(["added", "extra", "x-note", "id"])
    node["properties"][name] = _Generator(rng).schema(2)
    return True


def _remove_property(rng: random.Random, schema: dict[str, Any]) -> bool:
    objects = [n for n in _with(schema, "properties") if len(n["properties"]) > 1]
    if not objects:
        return False
    node = rng.choice(objects)
    name = rng.choice(list(node["properties"]))
    del node["properties"][name]
    if name in node.get("required", []):
        node["required"] = [r for r in node["required"] if r != name]
        if not node["required"]:
            del node["required"]
    return True


def _toggle_closed(rng: random.Random, schema: dict[str, Any]) -> bool:
    objects = _with(schema, "properties")
    if not objects:
        return False
    node = rng.choice(objects)
    if "additionalProperties" in node:
        del node["additionalProperties"]
    else:
        node["additionalProperties"] = rng.choice([False, {"type": "string"}, True])
    return True


_TYPE_CHANGES = {
    "integer": ["number", ["integer", "null"], "string"],
    "number": ["integer", ["number", "string"]],
    "string": [["string", "null"], "integer"],
    "boolean": [["boolean", "null"], "string"],
    "null": ["boolean", ["null", "string"]],
}


def _change_type(rng: random.Random, schema: dict[str, Any]) -> bool:
    typed = [n for n in _with(schema, "type") if isinstance(n["type"], str)]
    typed = [n for n in typed if n["type"] in _TYPE_CHANGES]
    if not typed:
        return False
    node = rng.choice(typed)
    node["type"] = rng.choice(_TYPE_CHANGES[node["type"]])
    return True


def _edit_enum(rng: random.Random, schema: dict[str, Any]) -> bool:
    enums = _with(schema, "enum")
    if not enums:
        return False
    node = rng.choice(enums)
    if len(node["enum"]) > 1 and rng.random() < 0.5:
        node["enum"] = node["enum"][:-1]
    else:
        extra = rng.choice(["z", 9, False, "a"])
        if extra not in node["enum"] or isinstance(extra, bool):
            node["enum"] = [*node["enum"], extra]
    return True


def _wrap_union(rng: random.Random, schema: dict[str, Any]) -> bool:
    objects = _with(schema, "properties")
    if not objects:
        return False
    node = rng.choice(objects)
    name = rng.choice(list(node["properties"]))
    other = rng.choice([{"type": "null"}, {"type": "string"}, {"type": "integer"}])
    node["properties"][name] = {"anyOf": [node["properties"][name], other]}
    return True


def _change_items(rng: random.Random, schema: dict[str, Any]) -> bool:
    arrays = _with(schema, "items")
    if not arrays:
        return False
    node = rng.choice(arrays)
    choice = rng.random()
    if choice < 0.3:
        node["uniqueItems"] = not node.get("uniqueItems", False)
    elif choice < 0.6:
        node["items"] = _Generator(rng).schema(2)
    else:
        node["maxItems"] = rng.randint(1, 4)
    return True


def _add_not(rng: random.Random, schema: dict[str, Any]) -> bool:
    node = rng.choice(_nodes(schema))
    node["not"] = rng.choice([{"type": "null"}, {"const": "a"}, {"type": "string"}])
    return True


EDITS: list[Edit] = [
    _move_bound,
    _move_bound,
    _toggle_required,
    _add_property,
    _remove_property,
    _toggle_closed,
    _change_type,
    _change_type,
    _edit_enum,
    _wrap_union,
    _change_items,
    _add_not,
]


def generated(count: int = GENERATED, seed: int = SEED) -> list[Pair]:
    rng = random.Random(seed)
    pairs = []
    for index in range(count):
        old = _Generator(rng).schema()
        new = copy.deepcopy(old)
        applied = []
        for _ in range(rng.choice([1, 1, 2])):
            for edit in rng.sample(EDITS, len(EDITS)):
                if edit(rng, new):
                    applied.append(edit.__name__.strip("_"))
                    break
        label = f"generated {index}: {', '.join(applied)}"
        pairs.append(Pair(f"{label} (new reads old)", new, old))
        pairs.append(Pair(f"{label} (old reads new)", old, new))
    return pairs


D2020 = "https://json-schema.org/draft/2020-12/schema"
D4 = "http://json-schema.org/draft-04/schema#"

# (name, reader, writer): where a structural comparison is easiest to get wrong.
HAND_WRITTEN = [
    ("unevaluatedProperties with a property added",
     {"$schema": D2020, "properties": {"a": {}}, "unevaluatedProperties": False},
     {"$schema": D2020, "properties": {"a": {}, "b": {}}, "unevaluatedProperties": False}),
    ("unevaluatedItems with an item added",
     {"$schema": D2020, "prefixItems": [{}], "unevaluatedItems": False},
     {"$schema": D2020, "prefixItems": [{}, {}], "unevaluatedItems": False}),
    ("float multipleOf dividing the writer's",
     {"type": "number", "multipleOf": 0.1}, {"type": "number", "multipleOf": 0.3}),
    ("integer multipleOf dividing the writer's",
     {"type": "integer", "multipleOf": 2}, {"type": "integer", "multipleOf": 6}),
    ("prefixItems is no keyword in draft 7",
     {"type": "array", "items": [{"type": "string"}]},
     {"type": "array", "prefixItems": [{"type": "string"}]}),
    ("prefixItems in 2020-12",
     {"$schema": D2020, "type": "array", "prefixItems": [{"type": "string"}]},
     {"$schema": D2020, "type": "array", "prefixItems": [{"type": "string", "minLength": 1}]}),
    ("draft 4 exclusive bound read by draft 7",
     {"type": "number", "exclusiveMinimum": 0},
     {"$schema": D4, "type": "number", "minimum": 0, "exclusiveMinimum": True}),
    ("integer read as number", {"type": "number"}, {"type": "integer"}),
    ("number read as integer", {"type": "integer"}, {"type": "number", "multipleOf": 1}),
    ("pattern property constrained as a declared property",
     {"type": "object", "properties": {"ab": {"type": "integer"}}},
     {"type": "object", "patternProperties": {"^a": {"type": "string"}}}),
    ("closed reader, writer pattern properties",
     {"type": "object", "properties": {"a": {}}, "additionalProperties": False},
     {"type": "object", "properties": {"a": {}}, "patternProperties": {"^x-": {}},
      "additionalProperties": False}),
    ("required split over writer branches", {"required": ["a"]},
     {"anyOf": [{"required": ["a"]}, {"required": ["b"]}]}),
    ("required from writer allOf",
     {"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}}},
     {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}},
                {"required": ["a"]}]}),
    ("oneOf reader where writer matches both branches",
     {"oneOf": [{"type": "number"}, {"type": "integer"}]}, {"type": "integer"}),
    ("oneOf reader with disjoint branches",
     {"oneOf": [{"type": "string"}, {"type": "integer"}]}, {"type": "integer"}),
    ("not reader excluding a writer value", {"not": {"const": 3}}, {"type": "integer"}),
    ("not reader excluding nothing the writer allows",
     {"not": {"const": "a"}}, {"type": "integer"}),
    ("true is not 1", {"enum": [1]}, {"const": True}),
    ("1.0 is 1", {"enum": [1]}, {"const": 1.0}),
    ("uniqueItems added", {"type": "array", "uniqueItems": True}, {"type": "array"}),
    ("contains kept", {"type": "array", "contains": {"type": "integer"}},
     {"type": "array", "contains": {"type": "integer"}, "items": {"type": "integer"}}),
    ("propertyNames kept", {"type": "object", "propertyNames": {"maxLength": 2}},
     {"type": "object", "propertyNames": {"maxLength": 2}, "properties": {"abc": False}}),
    ("dependentRequired added", {"$schema": D2020, "dependentRequired": {"a": ["b"]}},
     {"$schema": D2020, "type": "object"}),
    ("recursive tree deepened",
     {"definitions": {"n": {"type": "object", "properties": {"c": {"type": "array",
      "items": {"$ref": "#/definitions/n"}}, "v": {"type": "integer"}}}},
      "$ref": "#/definitions/n"},
     {"definitions": {"n": {"type": "object", "properties": {"c": {"type": "array",
      "items": {"$ref": "#/definitions/n"}}, "v": {"type": "integer", "minimum": 0}}}},
      "$ref": "#/definitions/n"}),
    ("recursive tree narrowed",
     {"definitions": {"n": {"type": "object", "properties": {"c": {"type": "array",
      "items": {"$ref": "#/definitions/n"}}, "v": {"type": "integer", "maximum": 5}}}},
      "$ref": "#/definitions/n"},
     {"definitions": {"n": {"type": "object", "properties": {"c": {"type": "array",
      "items": {"$ref": "#/definitions/n"}}, "v": {"type": "integer"}}}},
      "$ref": "#/definitions/n"}),
    ("if/then kept with a narrower writer",
     {"if": {"properties": {"k": {"const": "a"}}}, "then": {"required": ["x"]}},
     {"if": {"properties": {"k": {"const": "a"}}}, "then": {"required": ["x"]},
      "properties": {"k": {"type": "string"}}}),
    ("writer not dropped", {"type": "integer"}, {"type": "integer", "not": {"const": 0}}),
    ("empty enum writer", {"type": "string"}, {"enum": []}),
    ("false writer", {"type": "string"}, False),
    ("true reader", True, {"type": "string"}),
    ("minProperties with a pattern", {"type": "object", "minProperties": 1},
     {"type": "object", "patternProperties": {"^x-": {}}, "minProperties": 1}),
    ("maxProperties added", {"type": "object", "maxProperties": 1},
     {"type": "object", "properties": {"a": {}, "b": {}}}),
    ("additionalProperties schema narrowed", {"type": "object", "additionalProperties":
     {"type": "integer"}}, {"type": "object", "additionalProperties": {"type": "number"}}),
    ("additionalItems closed", {"type": "array", "items": [{}], "additionalItems": False},
     {"type": "array", "items": [{}, {}]}),
    ("string length in code points", {"type": "string", "maxLength": 1},
     {"type": "string", "maxLength": 1, "pattern": "^.$"}),
]  # fmt: skip


def hand_written() -> list[Pair]:
    return [Pair(name, reader, writer) for name, reader, writer in HAND_WRITTEN]


def from_matrix() -> list[Pair]:
    pairs = []
    for case in JSON_CASES:
        pairs.append(Pair(f"{case.name} (new reads old)", case.new, case.old))
        pairs.append(Pair(f"{case.name} (old reads new)", case.old, case.new))
    return pairs


def corpus() -> list[Pair]:
    return hand_written() + from_matrix() + generated()
