"""Writer data for Avro violations, in Avro's JSON encoding (the specification's "JSON
Encoding": a union value is ``{"<branch name>": value}`` unless null, bytes and fixed are
strings of code points 0-255).

``smallest`` proposes the least datum of a writer type; the resolution walk (``avro.py``)
places the datum that reaches a violation inside the writer's smallest datum around it,
and ``encodes`` checks the whole against the writer's schema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from changebroker.registry.compat.model import NOTHING

if TYPE_CHECKING:
    from changebroker.registry.compat.avro import Node

_SMALLEST: dict[str, Any] = {
    "null": None,
    "boolean": False,
    "int": 0,
    "long": 0,
    "float": 0.0,
    "double": 0.0,
    "string": "",
    "bytes": "",
}
_DEPTH = 32  # a recursive type's smallest datum ends long before this


def branch_name(node: Node) -> str:
    """The name a union value of ``node`` is keyed by in the JSON encoding."""
    return node.fullname or node.kind


def in_union(node: Node, value: Any) -> Any:
    """``value`` of union branch ``node``, as the JSON encoding writes it."""
    if value is NOTHING:
        return NOTHING
    return None if node.kind == "null" else {branch_name(node): value}


def smallest(node: Node, depth: int = 0) -> Any:
    """The least datum of ``node`` (NOTHING where a type only ever nests itself)."""
    if depth > _DEPTH:
        return NOTHING
    if node.kind in _SMALLEST:
        return _SMALLEST[node.kind]
    if node.kind == "fixed":
        return "\u0000" * node.size
    if node.kind == "enum":
        return node.symbols[0] if node.symbols else NOTHING
    if node.kind == "array":
        return []
    if node.kind == "map":
        return {}
    if node.kind == "union":
        # The branch that nests least: null and primitives first.
        for branch in sorted(node.children, key=_nesting):
            value = in_union(branch, smallest(branch, depth + 1))
            if value is not NOTHING:
                return value
        return NOTHING
    record: dict[str, Any] = {}
    for field in node.fields:
        value = smallest(field.type, depth + 1)
        if value is NOTHING:
            return NOTHING
        record[field.name] = value
    return record


def with_field(record: Node, name: str, value: Any) -> Any:
    """The smallest datum of ``record`` with field ``name`` set to ``value``."""
    base = smallest(record)
    if value is NOTHING or base is NOTHING:
        return NOTHING
    return {**base, name: value}


def _nesting(node: Node) -> int:
    return {"null": 0, "record": 3, "union": 4}.get(node.kind, 1 if node.kind in _SMALLEST else 2)


def encodes(node: Node, datum: Any, depth: int = 0) -> bool:
    """``datum`` is a value of ``node`` in the JSON encoding."""
    if depth > 2 * _DEPTH:
        return False
    kind = node.kind
    if kind == "null":
        return datum is None
    if kind == "boolean":
        return isinstance(datum, bool)
    if kind in ("int", "long"):
        bits = 31 if kind == "int" else 63
        return (
            isinstance(datum, int) and not isinstance(datum, bool) and -(2**bits) <= datum < 2**bits
        )
    if kind in ("float", "double"):
        return isinstance(datum, int | float) and not isinstance(datum, bool)
    if kind in ("string", "bytes", "fixed"):
        if not isinstance(datum, str):
            return False
        if kind == "string":
            return True
        return all(ord(c) < 256 for c in datum) and (kind == "bytes" or len(datum) == node.size)
    if kind == "enum":
        return datum in node.symbols
    if kind == "array":
        return isinstance(datum, list) and all(
            encodes(node.children[0], item, depth + 1) for item in datum
        )
    if kind == "map":
        return isinstance(datum, dict) and all(
            encodes(node.children[0], item, depth + 1) for item in datum.values()
        )
    if kind == "union":
        if datum is None:
            return any(b.kind == "null" for b in node.children)
        if not isinstance(datum, dict) or len(datum) != 1:
            return False
        ((name, value),) = datum.items()
        return any(branch_name(b) == name and encodes(b, value, depth + 1) for b in node.children)
    return (
        isinstance(datum, dict)
        and set(datum) == {f.name for f in node.fields}
        and all(encodes(f.type, datum[f.name], depth + 1) for f in node.fields)
    )
