"""Avro compatibility by the specification's schema-resolution rules.

``avro_violations(reader, writer)``: can data written with ``writer`` be read
with ``reader``? Records, enums and fixed match by unqualified name or by a
reader alias naming the writer's full name (fixed also by size); reader fields
missing from the writer need a default; writer fields the reader lacks are
skipped; int/long/float/double promote upwards and string and bytes into each
other; a writer union needs every branch readable; a reader union is resolved
through its first branch that matches the writer; enum symbols the reader
lacks need the reader's enum default.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from changebroker.registry.compat.avro_witness import encodes, in_union, smallest, with_field
from changebroker.registry.compat.model import (
    PairWalk,
    SchemaError,
    Violation,
    just,
    pending,
    placed,
    settle,
)
from changebroker.registry.compat.rules import Rule

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})

# writer type -> reader types that can read it.
_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class Field:
    name: str
    type: Node
    has_default: bool
    aliases: frozenset[str]


@dataclass
class Node:
    """One parsed Avro schema: kind is a primitive name or record/enum/fixed/array/map/union."""

    kind: str
    fullname: str = ""
    aliases: frozenset[str] = frozenset()
    fields: list[Field] = field(default_factory=list)
    symbols: list[str] = field(default_factory=list)
    enum_default: str | None = None
    size: int = 0
    children: list[Node] = field(default_factory=list)  # items, values, or union branches

    @property
    def short_name(self) -> str:
        return self.fullname.rsplit(".", 1)[-1]

    def describe(self) -> str:
        return self.fullname if self.fullname else self.kind


def parse(schema: Any) -> Node:
    """Parse an Avro schema (JSON text or its decoded form); SchemaError says what is wrong."""
    if isinstance(schema, str):
        text = schema.strip()
        if text[:1] in ("{", "[", '"'):
            try:
                schema = json.loads(text)
            except json.JSONDecodeError as error:
                raise SchemaError(f"the Avro schema is not valid JSON: {error}") from error
    try:
        return _Parser().parse(schema, "", "#")
    except RecursionError:
        raise SchemaError("the Avro schema nests too deeply; name and reuse types") from None


# The typeName of a schema object (Avro spec, schema declaration): a primitive or derived type.
_DERIVED = frozenset({"record", "error", "enum", "array", "map", "fixed"})
_ORDERS = frozenset({"ascending", "descending", "ignore"})
_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}


class _Parser:
    def __init__(self) -> None:
        self.names: dict[str, Node] = {}

    def _fullname(self, name: Any, namespace: str, where: str) -> str:
        if not isinstance(name, str) or not name:
            raise SchemaError(f"{where} needs a 'name' string")
        if "." in name:
            parts = name.split(".")
        else:
            parts = [*(namespace.split(".") if namespace else []), name]
        if not all(_NAME.match(p) for p in parts):
            raise SchemaError(f"{where}: {name!r} is not a valid Avro name (letters, digits, _)")
        return ".".join(parts)

    def _define(self, node: Node, path: str) -> None:
        if node.fullname in self.names or node.fullname in PRIMITIVES:
            raise SchemaError(f"at {path}: the Avro name {node.fullname!r} is defined twice")
        self.names[node.fullname] = node

    def parse(self, schema: Any, namespace: str, path: str) -> Node:
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return Node(kind=schema)
            for candidate in (f"{namespace}.{schema}" if namespace else schema, schema):
                if candidate in self.names:
                    return self.names[candidate]
            raise SchemaError(f"at {path}: unknown Avro type {schema!r}: define it before using it")
        if isinstance(schema, list):
            return self._union(schema, namespace, path)
        if not isinstance(schema, Mapping):
            raise SchemaError(
                f"at {path}: an Avro schema is a string, an object or an array, not {schema!r}"
            )
        declared = schema.get("type")
        kind = declared if isinstance(declared, str) else ""  # "": no type name, refused below
        if kind in PRIMITIVES:
            return Node(kind=kind)
        if kind in ("record", "error", "enum", "fixed"):
            return self._named(schema, kind, namespace, path)
        if kind == "array":
            if "items" not in schema:
                raise SchemaError(f"at {path}: an Avro array needs 'items'")
            items = self.parse(schema["items"], namespace, f"{path}/items")
            return Node(kind="array", children=[items])
        if kind == "map":
            if "values" not in schema:
                raise SchemaError(f"at {path}: an Avro map needs 'values'")
            values = self.parse(schema["values"], namespace, f"{path}/values")
            return Node(kind="map", children=[values])
        # {"type": X} names what it is: X is a primitive or derived type name, never a
        # schema (an object or array) nor a named type (spec, schema declaration).
        raise SchemaError(
            f"at {path}/type: an Avro schema object's 'type' is a primitive type or one of"
            f" {', '.join(sorted(_DERIVED))}, not {json.dumps(declared)}; write a named type or a"
            ' union as the schema itself ("MyRecord", ["null", "int"])'
        )

    def _union(self, schema: list[Any], namespace: str, path: str) -> Node:
        branches = [self.parse(b, namespace, f"{path}/{i}") for i, b in enumerate(schema)]
        seen: dict[str, int] = {}
        for index, branch in enumerate(branches):
            if branch.kind == "union":
                raise SchemaError(
                    f"at {path}/{index}: an Avro union cannot directly contain another union"
                )
            # Only named types may repeat a kind; then their names tell them apart.
            key = branch.fullname or branch.kind
            if key in seen:
                raise SchemaError(
                    f"at {path}/{index}: the Avro union already has a {key} (branch"
                    f" {seen[key]}); a union holds one schema of each unnamed type"
                )
            seen[key] = index
        return Node(kind="union", children=branches)

    def _named(self, schema: Mapping[str, Any], kind: str, namespace: str, path: str) -> Node:
        own_namespace = schema.get("namespace")
        if own_namespace is None:  # absent, or null as some writers spell it: inherited
            own_namespace = namespace
        if not isinstance(own_namespace, str):
            raise SchemaError(f"at {path}/namespace: an Avro 'namespace' is a string")
        fullname = self._fullname(schema.get("name"), own_namespace, f"at {path}: an Avro {kind}")
        inner = fullname.rsplit(".", 1)[0] if "." in fullname else ""
        declared = schema.get("aliases", [])
        if not isinstance(declared, list):
            raise SchemaError(f"at {path}/aliases: the aliases of {fullname} are a list of names")
        aliases = frozenset(
            self._fullname(a, inner, f"at {path}/aliases: an alias of {fullname}") for a in declared
        )
        node = Node(kind="record" if kind == "error" else kind, fullname=fullname, aliases=aliases)
        self._define(node, path)
        if kind == "enum":
            self._enum(node, schema, path)
        elif kind == "fixed":
            size = schema.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise SchemaError(
                    f"at {path}/size: the Avro fixed {fullname} needs a non-negative integer 'size'"
                )
            node.size = size
        else:
            fields = schema.get("fields")
            if not isinstance(fields, list):
                raise SchemaError(f"at {path}: the Avro record {fullname} needs 'fields', a list")
            for index, raw in enumerate(fields):
                node.fields.append(self._field(node, raw, inner, f"{path}/fields/{index}"))
        return node

    def _enum(self, node: Node, schema: Mapping[str, Any], path: str) -> None:
        symbols = schema.get("symbols")
        if not isinstance(symbols, list) or not all(
            isinstance(s, str) and _NAME.match(s) for s in symbols
        ):
            raise SchemaError(
                f"at {path}/symbols: the Avro enum {node.fullname} needs 'symbols', a list of names"
            )
        if len(set(symbols)) != len(symbols):
            raise SchemaError(
                f"at {path}/symbols: the Avro enum {node.fullname} lists a symbol twice"
            )
        node.symbols = list(symbols)
        default = schema.get("default")
        if default is not None and default not in symbols:
            raise SchemaError(
                f"at {path}/default: the default of the Avro enum {node.fullname} is not one of"
                " its symbols"
            )
        node.enum_default = default

    def _field(self, record: Node, raw: Any, namespace: str, path: str) -> Field:
        if not isinstance(raw, Mapping) or "type" not in raw:
            raise SchemaError(
                f"at {path}: each field of the Avro record {record.fullname} needs a 'type'"
            )
        name = raw.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise SchemaError(
                f"at {path}/name: a field of the Avro record {record.fullname} has no valid name"
            )
        if any(f.name == name for f in record.fields):
            raise SchemaError(
                f"at {path}/name: the Avro record {record.fullname} has two fields named {name!r}"
            )
        order = raw.get("order", "ascending")
        if not isinstance(order, str) or order not in _ORDERS:
            raise SchemaError(
                f"at {path}/order: the order of field {name!r} in {record.fullname} is"
                f" {order!r}; use ascending, descending or ignore"
            )
        field_type = self.parse(raw["type"], namespace, f"{path}/type")
        # A default is what a reader fills in: one of the wrong type breaks reading.
        if "default" in raw and not _default_fits(field_type, raw["default"]):
            raise SchemaError(
                f"at {path}/default: the default of field {name!r} in {record.fullname} is not"
                f" a {_type_text(field_type)}"
            )
        aliases = raw.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise SchemaError(
                f"at {path}/aliases: the aliases of field {name!r} in {record.fullname} are a list"
            )
        return Field(
            name=name, type=field_type, has_default="default" in raw, aliases=frozenset(aliases)
        )


def _type_text(node: Node) -> str:
    if node.kind == "union":
        return " or ".join(_type_text(b) for b in node.children)
    return node.describe()


def _default_fits(node: Node, value: Any) -> bool:
    """Is ``value`` a valid JSON encoding of a ``node`` default (Avro spec, field defaults)?"""
    kind = node.kind
    if kind == "union":
        # Avro 1.12: the default is of the first branch it matches (earlier: the first branch).
        return any(_default_fits(branch, value) for branch in node.children)
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in ("int", "long"):
        low, high = _INT_RANGE[kind]
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    if kind in ("float", "double"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind in ("bytes", "fixed"):
        # Code points 0-255 stand for byte values; a fixed default has exactly its size.
        fits = isinstance(value, str) and all(ord(c) < 256 for c in value)
        return fits and (kind == "bytes" or len(value) == node.size)
    if kind == "enum":
        return value in node.symbols
    if kind == "array":
        return isinstance(value, list) and all(_default_fits(node.children[0], v) for v in value)
    if kind == "map":
        return isinstance(value, dict) and all(
            _default_fits(node.children[0], v) for v in value.values()
        )
    # A record: every field without a default of its own must be given, and fit.
    return isinstance(value, dict) and all(
        _default_fits(f.type, value[f.name]) if f.name in value else f.has_default
        for f in node.fields
    )


def avro_violations(reader: Any, writer: Any, *, examples: bool = True) -> list[Violation]:
    """[] iff data written with ``writer`` can be read with ``reader`` (Avro resolution).

    Each violation carries, where one shows it, a datum of the writer (in Avro's JSON
    encoding) that reaches it; ``examples=False`` builds none."""
    reader_node, writer_node = parse(reader), parse(writer)
    try:
        found = _Resolution().read(reader_node, writer_node, "#")
    except RecursionError:
        return [Violation("#", Rule.SCHEMA_TOO_DEEP, "the schemas nest too deeply to compare")]
    return settle(found, (lambda datum: encodes(writer_node, datum)) if examples else None)


def _reached(violation: Violation, writer: Node) -> Violation:
    """``violation``, shown by the writer's smallest datum: it fails wherever it is read."""
    return pending(violation, lambda: [smallest(writer)])


def _names_match(reader: Node, writer: Node) -> bool:
    # Aliases are full names: alias "A" of r.B is r.A, which a writer's w.A is not.
    return reader.short_name == writer.short_name or writer.fullname in reader.aliases


def _matches(reader: Node, writer: Node, *, exact: bool) -> bool:
    """Does a reader union branch match the writer (spec: same kind, or a promotion)?"""
    if reader.kind != writer.kind:
        return not exact and reader.kind in _PROMOTIONS.get(writer.kind, set())
    if reader.kind == "fixed":
        return reader.size == writer.size and _names_match(reader, writer)
    if reader.kind in ("record", "enum"):
        return _names_match(reader, writer)
    return True


class _Resolution:
    def __init__(self) -> None:
        self.pairs = PairWalk()

    def read(self, reader: Node, writer: Node, path: str) -> list[Violation]:
        if writer.kind == "union":
            found: list[Violation] = []
            for index, branch in enumerate(writer.children):
                found += placed(
                    self.read(
                        reader, branch, f"{path}/{index}" if reader.kind != "union" else path
                    ),
                    functools.partial(in_union, branch),
                )
            return found
        if reader.kind == "union":
            for exact in (True, False):
                for index, branch in enumerate(reader.children):
                    if _matches(branch, writer, exact=exact):
                        found = self.read(branch, writer, f"{path}/{index}")
                        others = [b for b in reader.children if b is not branch]
                        if found and any(not self.read(b, writer, path) for b in others):
                            # Avro's decoder picks a branch that reads the writer (its
                            # records by their fields): the datum would show nothing there.
                            return [replace(v, example=None) for v in found]
                        return found
            return [
                _reached(
                    Violation(
                        path,
                        Rule.UNION_BRANCH_MISSING,
                        f"the writer may write {writer.describe()}, which no branch of the"
                        " reader's union can read",
                    ),
                    writer,
                )
            ]
        if reader.kind != writer.kind:
            if reader.kind in _PROMOTIONS.get(writer.kind, set()):
                return []
            return [
                _reached(
                    Violation(
                        path,
                        Rule.TYPE_MISMATCH,
                        f"the writer writes {writer.describe()}, which the reader's"
                        f" {reader.describe()} cannot read",
                    ),
                    writer,
                )
            ]
        if reader.kind in ("record", "enum", "fixed") and not _names_match(reader, writer):
            violation = Violation(
                f"{path}/name",
                Rule.NAME_MISMATCH,
                f"the reader's {reader.kind} {reader.fullname} does not match the writer's"
                f" {writer.fullname}; add an alias to the reader to rename it",
            )
            # Avro's own decoder matches records by their fields, not their names: no datum
            # of a renamed record fails there, so it shows none (enums and fixed it checks).
            return [violation if reader.kind == "record" else _reached(violation, writer)]
        return self.pairs.compare(reader, writer, lambda: self._same_kind(reader, writer, path))

    def _same_kind(self, reader: Node, writer: Node, path: str) -> list[Violation]:
        if reader.kind == "record":
            return self._record(reader, writer, path)
        if reader.kind == "enum":
            if reader.enum_default is not None:
                return []
            return [
                pending(
                    Violation(
                        f"{path}/symbols",
                        Rule.ENUM_SYMBOL_MISSING,
                        f"the writer may write symbol {symbol!r} of {writer.fullname}, which the"
                        " reader's enum lacks and has no default for",
                    ),
                    just(symbol),
                )
                for symbol in writer.symbols
                if symbol not in reader.symbols
            ]
        if reader.kind == "fixed" and reader.size != writer.size:
            return [
                _reached(
                    Violation(
                        f"{path}/size",
                        Rule.FIXED_SIZE_CHANGED,
                        f"the writer's fixed {writer.fullname} has {writer.size} bytes, the"
                        f" reader's {reader.size}",
                    ),
                    writer,
                )
            ]
        if reader.kind == "array":  # one item reaches the items' violations
            found = self.read(reader.children[0], writer.children[0], f"{path}/items")
            return placed(found, lambda value: [value])
        if reader.kind == "map":
            found = self.read(reader.children[0], writer.children[0], f"{path}/values")
            return placed(found, lambda value: {"k": value})
        return []

    def _record(self, reader: Node, writer: Node, path: str) -> list[Violation]:
        found: list[Violation] = []
        by_name = {f.name: f for f in writer.fields}
        for reader_field in reader.fields:
            where = f"{path}/fields/{reader_field.name}"
            candidates = [reader_field.name, *sorted(reader_field.aliases - {reader_field.name})]
            matched = [by_name[n] for n in candidates if n in by_name]
            if len(matched) > 1:
                found.append(
                    Violation(
                        where,
                        Rule.FIELD_AMBIGUOUS,
                        f"the reader's field {reader_field.name!r} matches the writer's fields"
                        f" {' and '.join(repr(m.name) for m in matched)} of {writer.fullname} by"
                        " name or alias; keep one of them in its name and aliases",
                    )
                )
            elif matched:
                field = matched[0].name
                found += placed(
                    self.read(reader_field.type, matched[0].type, f"{where}/type"),
                    functools.partial(with_field, writer, field),
                )
            elif not reader_field.has_default:
                found.append(
                    _reached(
                        Violation(
                            where,
                            Rule.FIELD_WITHOUT_DEFAULT,
                            f"the reader's field {reader_field.name!r} is missing from the"
                            f" writer's {writer.fullname} and has no default",
                        ),
                        writer,
                    )
                )
        return found
