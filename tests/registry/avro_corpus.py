"""A seeded corpus of Avro schema pairs (old, new) for the reference comparison with Apache Avro.

Generated pairs evolve a random record by one or two edits of the kinds schema authors make
(fields added, removed, renamed with aliases, promoted, enums and unions grown or shrunk,
names and namespaces changed); hand-written pairs add the shapes the specification is
explicit about. The same seed gives the same corpus on every run.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SEED = 20
GENERATED = 380

PRIMITIVE_DEFAULTS: dict[str, Any] = {
    "null": None,
    "boolean": False,
    "int": 7,
    "long": 2**40,
    "float": 1.5,
    "double": -2.25,
    "bytes": "\u0000\u00ff",
    "string": "s",
}


@dataclass(frozen=True)
class Pair:
    name: str
    old: Any
    new: Any


class _Generator:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.counter = 0

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def type_(self, depth: int) -> tuple[Any, Any]:
        """A field type and a default that fits it (None: give no default)."""
        rng = self.rng
        choice = rng.choice(
            ["primitive"] * 6 + ["enum", "fixed", "array", "map", "union", "nullable"]
            + (["record"] if depth < 2 else [])
        )  # fmt: skip
        if choice == "primitive":
            kind = rng.choice(list(PRIMITIVE_DEFAULTS))
            return kind, PRIMITIVE_DEFAULTS[kind]
        if choice == "enum":
            symbols = rng.sample(["A", "B", "C", "D", "E"], rng.randint(1, 4))
            enum: dict[str, Any] = {"type": "enum", "name": self.fresh("E"), "symbols": symbols}
            if rng.random() < 0.3:
                enum["default"] = symbols[0]
            return enum, symbols[-1]
        if choice == "fixed":
            size = rng.choice([0, 1, 4, 8, 16])
            return {"type": "fixed", "name": self.fresh("F"), "size": size}, "\u0000" * size
        if choice in ("array", "map"):
            inner, inner_default = self.type_(depth + 1)
            if choice == "array":
                return {"type": "array", "items": inner}, [] if rng.random() < 0.5 else (
                    [inner_default] if inner_default is not None else []
                )
            return {"type": "map", "values": inner}, {}
        if choice == "nullable":
            kind = rng.choice(["int", "long", "string", "double", "boolean"])
            if rng.random() < 0.5:
                return ["null", kind], None
            return [kind, "null"], PRIMITIVE_DEFAULTS[kind]
        if choice == "union":
            kinds = rng.sample(["int", "long", "string", "bytes", "float", "boolean"], 2)
            return kinds, PRIMITIVE_DEFAULTS[kinds[0]]
        return self.record(depth + 1), None

    def record(self, depth: int = 0, name: str | None = None) -> dict[str, Any]:
        fields = []
        for index in range(self.rng.randint(1, 4)):
            field_type, default = self.type_(depth)
            field: dict[str, Any] = {"name": f"f{index}", "type": field_type}
            if default is not None and self.rng.random() < 0.4:
                field["default"] = default
            fields.append(field)
        record: dict[str, Any] = {
            "type": "record",
            "name": name or self.fresh("R"),
            "fields": fields,
        }
        if depth == 0 and self.rng.random() < 0.4:
            record["namespace"] = self.rng.choice(["a", "a.b", "c"])
        return record


# Each edit changes a top-level record in place; it may find nothing to change (then a
# different edit is tried).
Edit = Callable[[random.Random, dict[str, Any]], bool]


def _add_field(rng: random.Random, record: dict[str, Any]) -> bool:
    kind = rng.choice(list(PRIMITIVE_DEFAULTS))
    field: dict[str, Any] = {"name": f"added{len(record['fields'])}", "type": kind}
    if rng.random() < 0.6:
        field["default"] = PRIMITIVE_DEFAULTS[kind]
    record["fields"].append(field)
    return True


def _remove_field(rng: random.Random, record: dict[str, Any]) -> bool:
    if len(record["fields"]) < 2:
        return False
    record["fields"].pop(rng.randrange(len(record["fields"])))
    return True


def _rename_field(rng: random.Random, record: dict[str, Any]) -> bool:
    field = rng.choice(record["fields"])
    old = field["name"]
    field["name"] = old + "_renamed"
    if rng.random() < 0.7:
        field["aliases"] = [old]
    return True


_RETYPES = {
    "int": ["long", "float", "double", "string"],
    "long": ["int", "float", "double"],
    "float": ["double", "int"],
    "double": ["float", "long"],
    "string": ["bytes", "int"],
    "bytes": ["string", "boolean"],
    "boolean": ["int", "null"],
    "null": ["boolean"],
}


def _retype_field(rng: random.Random, record: dict[str, Any]) -> bool:
    primitive = [
        f for f in record["fields"] if isinstance(f["type"], str) and f["type"] in _RETYPES
    ]
    if not primitive:
        return False
    field = rng.choice(primitive)
    field["type"] = rng.choice(_RETYPES[field["type"]])
    field.pop("default", None)
    if rng.random() < 0.5:
        field["default"] = PRIMITIVE_DEFAULTS[field["type"]]
    return True


def _named_in(node: Any, kind: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(node, list):
        for item in node:
            found += _named_in(item, kind)
    elif isinstance(node, dict):
        if node.get("type") == kind:
            found.append(node)
        for key in ("fields", "type", "items", "values"):
            if key in node:
                found += _named_in(node[key], kind)
    return found


def _edit_enum(rng: random.Random, record: dict[str, Any]) -> bool:
    enums = _named_in(record["fields"], "enum")
    if not enums:
        return False
    enum = rng.choice(enums)
    action = rng.choice(["add", "remove", "default", "add"])
    if action == "add":
        enum["symbols"] = [*enum["symbols"], rng.choice(["X", "Y", "Z"])]
        enum["symbols"] = list(dict.fromkeys(enum["symbols"]))
    elif action == "remove" and len(enum["symbols"]) > 1:
        removed = enum["symbols"].pop()
        if enum.get("default") == removed:
            del enum["default"]
    else:
        enum["default"] = enum["symbols"][0]
    _drop_defaults_of(record, enum)
    return True


def _drop_defaults_of(record: dict[str, Any], changed: dict[str, Any]) -> None:
    """A default may no longer fit a changed type: the edit is about the type, so drop it."""
    for field in record["fields"]:
        if changed in _named_in(field["type"], changed["type"]) or field["type"] is changed:
            field.pop("default", None)


def _edit_fixed(rng: random.Random, record: dict[str, Any]) -> bool:
    fixed = _named_in(record["fields"], "fixed")
    if not fixed:
        return False
    target = rng.choice(fixed)
    target["size"] = target["size"] + rng.choice([1, 4])
    _drop_defaults_of(record, target)
    return True


def _edit_union(rng: random.Random, record: dict[str, Any]) -> bool:
    unions = [f for f in record["fields"] if isinstance(f["type"], list)]
    if not unions:
        field = rng.choice(record["fields"])
        if isinstance(field["type"], str) and field["type"] != "null":
            field["type"] = ["null", field["type"]]
            field["default"] = None
            return True
        return False
    field = rng.choice(unions)
    branches = field["type"]
    action = rng.choice(["add", "remove", "reorder"])
    if action == "add":
        extra = [k for k in ("int", "string", "double", "bytes", "null") if k not in branches]
        if not extra:
            return False
        field["type"] = [*branches, rng.choice(extra)]
    elif action == "remove" and len(branches) > 1:
        field["type"] = branches[1:]
        field.pop("default", None)
    else:
        field["type"] = list(reversed(branches))
        field.pop("default", None)
    return True


def _rename_record(rng: random.Random, record: dict[str, Any]) -> bool:
    old = record["name"]
    namespace = record.get("namespace")
    record["name"] = old + "V2"
    choice = rng.choice(["none", "short", "full", "moved"])
    if choice == "short":
        record["aliases"] = [old]
    elif choice == "full":
        record["aliases"] = [f"{namespace}.{old}" if namespace else old]
    elif choice == "moved":
        record["namespace"] = "moved"
        record["aliases"] = [old]  # means moved.<old>: matches only if old had that namespace
    return True


def _change_namespace(rng: random.Random, record: dict[str, Any]) -> bool:
    record["namespace"] = rng.choice(["x", "x.y", "a"])
    return True


def _nest_promotion(rng: random.Random, record: dict[str, Any]) -> bool:
    arrays = _named_in(record["fields"], "array") + _named_in(record["fields"], "map")
    for node in arrays:
        key = "items" if node["type"] == "array" else "values"
        if isinstance(node[key], str) and node[key] in _RETYPES:
            node[key] = rng.choice(_RETYPES[node[key]])
            _drop_defaults_of(record, node)
            return True
    return False


EDITS: list[Edit] = [
    _add_field,
    _add_field,
    _remove_field,
    _rename_field,
    _retype_field,
    _retype_field,
    _edit_enum,
    _edit_fixed,
    _edit_union,
    _edit_union,
    _rename_record,
    _change_namespace,
    _nest_promotion,
]


def generated(count: int = GENERATED, seed: int = SEED) -> list[Pair]:
    rng = random.Random(seed)
    pairs = []
    for index in range(count):
        old = _Generator(rng).record()
        new = copy.deepcopy(old)
        applied = []
        for _ in range(rng.choice([1, 1, 2])):
            for edit in rng.sample(EDITS, len(EDITS)):
                if edit(rng, new):
                    applied.append(edit.__name__.strip("_"))
                    break
        pairs.append(Pair(f"generated {index}: {', '.join(applied)}", old, new))
    return pairs


def _r(name: str, *fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def _f(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def _fixed(name: str, size: int) -> dict[str, Any]:
    return {"type": "fixed", "name": name, "size": size}


ZEROS = _r("Z", _f("magic", _fixed("Magic", 4), default="\u0000\u0000\u0000\u0000"))

# Shapes the specification is explicit about, and the corners of the registry's rules.
HAND_WRITTEN = [
    Pair("zero bytes as a fixed default", ZEROS, ZEROS),
    Pair(
        "zero bytes default added",
        _r("Z", _f("a", "int")),
        {**ZEROS, "fields": [_f("a", "int"), *ZEROS["fields"]]},
    ),
    Pair(
        "alias without namespace means the reader's",
        _r("A", _f("a", "int"), namespace="w"),
        _r("B", _f("a", "int"), namespace="r", aliases=["A"]),
    ),
    Pair(
        "alias with the writer's full name",
        _r("A", _f("a", "int"), namespace="w"),
        _r("B", _f("a", "int"), namespace="r", aliases=["w.A"]),
    ),
    Pair(
        "alias in the same namespace",
        _r("A", _f("a", "int"), namespace="w"),
        _r("B", _f("a", "int"), namespace="w", aliases=["A"]),
    ),
    Pair(
        "same short name, other namespace",
        _r("A", _f("a", "int"), namespace="w"),
        _r("A", _f("a", "int"), namespace="r"),
    ),
    Pair(
        "enum renamed with a full-name alias",
        {"type": "enum", "name": "x.E", "symbols": ["A"]},
        {"type": "enum", "name": "y.G", "aliases": ["x.E"], "symbols": ["A"]},
    ),
    Pair("fixed into a union of two sizes", _fixed("w.F", 8), [_fixed("a.F", 4), _fixed("b.F", 8)]),
    Pair("fixed into a union of the wrong size", _fixed("w.F", 8), ["null", _fixed("a.F", 4)]),
    Pair("fixed size changed", _fixed("F", 8), _fixed("F", 16)),
    Pair(
        "reader field matches two writer fields",
        _r("R", _f("a", "int"), _f("c", "int")),
        _r("R", _f("b", "int", aliases=["a", "c"])),
    ),
    Pair(
        "reader field matches by name and by alias",
        _r("R", _f("a", "int"), _f("b", "int")),
        _r("R", _f("a", "int", aliases=["b"])),
    ),
    Pair(
        "field renamed with an alias",
        _r("R", _f("a", "int")),
        _r("R", _f("b", "int", aliases=["a"])),
    ),
    Pair("union of two ints", "int", ["int", "int"]),
    Pair(
        "union of two arrays",
        {"type": "array", "items": "int"},
        [{"type": "array", "items": "int"}, {"type": "array", "items": "long"}],
    ),
    Pair(
        "union of two maps",
        {"type": "map", "values": "int"},
        [{"type": "map", "values": "int"}, {"type": "map", "values": "string"}],
    ),
    Pair("union naming one record twice", _r("R", _f("a", "int")), [_r("R", _f("a", "int")), "R"]),
    Pair(
        "union of two records",
        _r("R", _f("a", "int")),
        [_r("R", _f("a", "int")), _r("S", _f("a", "int"))],
    ),
    Pair("int default beyond 32 bits", _r("R"), _r("R", _f("a", "int", default=2**31))),
    Pair("int default at the 32-bit limit", _r("R"), _r("R", _f("a", "int", default=-(2**31)))),
    Pair("long default beyond 64 bits", _r("R"), _r("R", _f("a", "long", default=2**63))),
    Pair("long default at the 64-bit limit", _r("R"), _r("R", _f("a", "long", default=2**63 - 1))),
    Pair(
        "field type object of an object",
        _r("R", _f("a", "int")),
        _r("R", _f("a", {"type": {"type": "int"}})),
    ),
    Pair(
        "field type object of an array",
        _r("R", _f("a", "int")),
        _r("R", _f("a", {"type": ["null", "int"]})),
    ),
    Pair(
        "field type object naming a record",
        _r("R", _f("a", _r("S"))),
        _r("R", _f("a", _r("S")), _f("b", {"type": "S"}, default={})),
    ),
    Pair(
        "field order sideways", _r("R", _f("a", "int")), _r("R", _f("a", "int", order="sideways"))
    ),
    Pair(
        "field order descending",
        _r("R", _f("a", "int")),
        _r("R", _f("a", "int", order="descending")),
    ),
    Pair(
        "union default of the second branch", _r("R"), _r("R", _f("a", ["null", "int"], default=3))
    ),
    Pair("union default of no branch", _r("R"), _r("R", _f("a", ["null", "int"], default="x"))),
    Pair(
        "enum default catches a new symbol",
        {"type": "enum", "name": "E", "symbols": ["A", "B"], "default": "A"},
        {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]},
    ),
    Pair(
        "enum symbol removed",
        {"type": "enum", "name": "E", "symbols": ["A", "B"]},
        {"type": "enum", "name": "E", "symbols": ["A"]},
    ),
    Pair("writer union into a reader without its branch", ["null", "int"], "int"),
    Pair("reader union with promotion only", "int", ["null", "long"]),
    Pair(
        "reader union, first matching branch not compatible",
        _r("R", _f("a", "int")),
        [
            _r("R", _f("a", "int"), _f("b", "int"), namespace="x"),
            _r("R", _f("a", "int"), namespace="y"),
        ],
    ),
    Pair("non-ASCII record name", _r("R"), _r("Ré")),
    Pair("bytes default beyond code point 255", _r("R"), _r("R", _f("a", "bytes", default="€"))),
    Pair("bytes default within code point 255", _r("R"), _r("R", _f("a", "bytes", default="ÿ"))),
    Pair(
        "fixed default of the wrong length",
        _r("R"),
        _r("R", _f("a", _fixed("F", 4), default="ab")),
    ),
    Pair("null namespace", _r("R", namespace="a"), {**_r("R"), "namespace": None}),
    Pair("string to bytes", "string", "bytes"),
    Pair("float NaN default", _r("R"), _r("R", _f("a", "float", default="NaN"))),
    Pair(
        "recursive list",
        _r("L", _f("v", "int"), _f("next", ["null", "L"], default=None)),
        _r("L", _f("v", "long"), _f("next", ["null", "L"], default=None)),
    ),
    Pair(
        "array items promoted",
        {"type": "array", "items": "int"},
        {"type": "array", "items": "double"},
    ),
    Pair(
        "map values narrowed", {"type": "map", "values": "double"}, {"type": "map", "values": "int"}
    ),
    Pair(
        "nested record renamed inside",
        _r("R", _f("p", _r("P", _f("x", "int")))),
        _r("R", _f("p", _r("Q", _f("x", "int"), aliases=["P"]))),
    ),
    Pair("error type as a record", {"type": "error", "name": "X", "fields": []}, _r("X")),
    Pair("logical type over its base", {"type": "int", "logicalType": "date"}, "int"),
    Pair(
        "decimal precision changed",
        {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2},
        {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2},
    ),
]


def corpus() -> list[Pair]:
    return HAND_WRITTEN + generated()
