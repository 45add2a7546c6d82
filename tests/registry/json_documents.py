"""Documents a JSON Schema allows, generated from the schema and kept only when it validates.

A seeded walk of the schema proposes values near its edges (bounds and bounds +/- 1,
lengths at the limits, optional properties present or absent, undeclared properties
named like the ones the other schema of a pair declares) and a little of everything
where the schema does not say; the schema's own validator keeps those it accepts.
hypothesis-jsonschema would do this too, but it no longer runs on the Hypothesis
version the test tools need, and edge values find witnesses faster.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

from changebroker.registry.compat.json_schema import validator_class

_STRINGS = ["", "a", "ab", "abc", "abcdef", "x", "xyz", "123", "0", "2024-01-01", "A-1", "é"]
_NUMBERS = [0, 1, -1, 2, 3, 4, 5, 6, 7, 10, 42, 100, 101, -10, -11, 0.5, 1.5, 2.5, -0.5, 7.5, 1e6]
_NO_VALUE = object()


class _Walk:
    def __init__(self, root: Any, rng: random.Random, names: Sequence[str]) -> None:
        self.root = root
        self.rng = rng
        self.names = list(names) or ["extra"]

    def value(self, node: Any, depth: int = 0) -> Any:
        rng = self.rng
        if depth > 6:
            return None
        if node is True or node is None or (isinstance(node, Mapping) and not node):
            return self.anything(depth)
        if node is False or not isinstance(node, Mapping):
            return _NO_VALUE
        if isinstance(node.get("$ref"), str):
            target = _resolve(self.root, node["$ref"])
            return self.anything(depth) if target is None else self.value(target, depth + 1)
        if "const" in node:
            return node["const"]
        if isinstance(node.get("enum"), list) and node["enum"]:
            return rng.choice(node["enum"])
        for union in ("anyOf", "oneOf"):
            if isinstance(node.get(union), list) and node[union]:
                branch = rng.choice(node[union])
                rest = {k: v for k, v in node.items() if k != union}
                return self.value(_merged(rest, branch), depth + 1)
        if isinstance(node.get("allOf"), list):
            merged: Any = {k: v for k, v in node.items() if k != "allOf"}
            for branch in node["allOf"]:
                merged = _merged(merged, branch)
            return self.value(merged, depth + 1)
        declared = node.get("type")
        types = [declared] if isinstance(declared, str) else list(declared or [])
        if not types:
            types = [_implied_type(node) or rng.choice(["null", "boolean", "number", "string"])]
        kind = rng.choice(types)
        if kind == "null":
            return None
        if kind == "boolean":
            return rng.choice([True, False])
        if kind in ("integer", "number"):
            return self.number(node, integer=kind == "integer")
        if kind == "string":
            return self.string(node)
        if kind == "array":
            return self.array(node, depth)
        return self.object(node, depth)

    def anything(self, depth: int) -> Any:
        choice = self.rng.randrange(7 if depth < 3 else 5)
        if choice == 0:
            return None
        if choice == 1:
            return self.rng.choice([True, False])
        if choice == 2:
            return self.rng.choice(_NUMBERS)
        if choice in (3, 4):
            return self.rng.choice(_STRINGS)
        if choice == 5:
            return [self.anything(depth + 1) for _ in range(self.rng.randint(0, 3))]
        return {n: self.anything(depth + 1) for n in self.rng.sample(self.names, 1)}

    def number(self, node: Mapping[str, Any], *, integer: bool) -> Any:
        edges: list[Any] = []
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            bound = node.get(key)
            if isinstance(bound, int | float) and not isinstance(bound, bool):
                edges += [bound, bound - 1, bound + 1, bound - 0.5, bound + 0.5]
        step = node.get("multipleOf")
        if isinstance(step, int | float) and not isinstance(step, bool) and step > 0:
            edges += [step * k for k in (0, 1, 2, 3, -1, 10)]
        value = self.rng.choice(edges + _NUMBERS) if edges else self.rng.choice(_NUMBERS)
        if integer:
            value = int(value) if float(value).is_integer() else round(value)
        return value

    def string(self, node: Mapping[str, Any]) -> str:
        lengths = [n for n in (node.get("minLength"), node.get("maxLength")) if isinstance(n, int)]
        candidates = list(_STRINGS)
        for length in lengths:
            for size in (length - 1, length, length + 1):
                if size >= 0:
                    candidates += ["a" * size, "1" * size]
        return self.rng.choice(candidates)

    def array(self, node: Mapping[str, Any], depth: int) -> Any:
        low: int = _typed(node, "minItems", int, 0)
        high: int = _typed(node, "maxItems", int, low + 3)
        size = self.rng.choice(sorted({low, high, high + 1, max(low - 1, 0), (low + high) // 2}))
        # prefixItems is a keyword of draft 2020-12 only: sometimes propose ignoring it.
        prefix = node.get("prefixItems") if self.rng.random() < 0.7 else None
        items = node.get("items", True)
        if isinstance(items, list):
            prefix, items = items, node.get("additionalItems", True)
        out = []
        for index in range(size):
            schema = prefix[index] if isinstance(prefix, list) and index < len(prefix) else items
            value = self.value(schema, depth + 1)
            if value is _NO_VALUE:
                break
            out.append(value)
        if len(out) > 1 and self.rng.random() < 0.3:
            out[-1] = out[0]  # duplicates, for uniqueItems
        return out

    def object(self, node: Mapping[str, Any], depth: int) -> Any:
        properties = _typed(node, "properties", Mapping, {})
        required = _typed(node, "required", list, [])
        out: dict[str, Any] = {}
        for name, schema in properties.items():
            if name in required or self.rng.random() < 0.6:
                value = self.value(schema, depth + 1)
                if value is not _NO_VALUE:
                    out[name] = value
        for name in required:
            out.setdefault(name, self.anything(depth + 1))
        patterns = node.get("patternProperties")
        if isinstance(patterns, Mapping) and patterns and self.rng.random() < 0.4:
            out["x-a"] = self.value(next(iter(patterns.values())), depth + 1)
        if self.rng.random() < 0.15:
            for name in self.names:  # many properties, for maxProperties
                out.setdefault(name, self.anything(depth + 1))
        if self.rng.random() < 0.4:
            name = self.rng.choice(self.names)
            extra = node.get("additionalProperties", True)
            schema = properties.get(name, extra)
            value = self.value(schema, depth + 1)
            if value is not _NO_VALUE:
                out[name] = value
        return out


def _typed(node: Mapping[str, Any], key: str, kind: type, fallback: Any) -> Any:
    """``node[key]`` when it is a ``kind``, else ``fallback``."""
    value = node.get(key)
    return value if isinstance(value, kind) else fallback


def _implied_type(node: Mapping[str, Any]) -> str | None:
    if any(k in node for k in ("properties", "required", "additionalProperties")):
        return "object"
    if any(k in node for k in ("items", "prefixItems", "minItems", "maxItems")):
        return "array"
    if any(k in node for k in ("minLength", "maxLength", "pattern")):
        return "string"
    if any(k in node for k in ("minimum", "maximum", "multipleOf")):
        return "number"
    return None


def _merged(first: Any, second: Any) -> Any:
    """A proposal schema for ``allOf``-like combinations: properties and requirements joined."""
    if not isinstance(first, Mapping) or not isinstance(second, Mapping):
        return second if isinstance(first, Mapping) and not first else first
    out = {**first, **second}
    for key in ("properties", "patternProperties"):
        if isinstance(first.get(key), Mapping) and isinstance(second.get(key), Mapping):
            out[key] = {**first[key], **second[key]}
    if isinstance(first.get("required"), list) and isinstance(second.get("required"), list):
        out["required"] = list(dict.fromkeys([*first["required"], *second["required"]]))
    return out


def _resolve(root: Any, ref: str) -> Any:
    if not ref.startswith("#"):
        return None
    node = root
    for raw in ref[2:].split("/") if ref != "#" else []:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and token in node:
            node = node[token]
        else:
            return None
    return node


def property_names(*schemas: Any) -> list[str]:
    """Every property name the schemas declare anywhere, and one nobody declares."""
    names: set[str] = {"zz-undeclared"}

    def visit(node: Any) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                if key == "properties" and isinstance(value, Mapping):
                    names.update(value)
                visit(value)
        elif isinstance(node, list):
            for item in node:
                visit(item)

    for schema in schemas:
        visit(schema)
    return sorted(names)


def documents(schema: Any, *, count: int, seed: int, names: Sequence[str] = ()) -> list[Any]:
    """Up to ``count`` distinct documents valid under ``schema`` (seeded, so repeatable)."""
    rng = random.Random(seed)
    walk = _Walk(schema, rng, names)
    validator = validator_class(schema)(schema)
    found: dict[str, Any] = {}
    for _ in range(count * 3):
        value = walk.value(schema)
        if value is _NO_VALUE:
            continue
        key = json.dumps(value, sort_keys=True)
        if key not in found and validator.is_valid(value):
            found[key] = value
            if len(found) == count:
                break
    return list(found.values())
