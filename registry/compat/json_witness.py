"""Witness documents for JSON Schema violations: values a writer schema allows, and the proof.

The comparison (``json_schema.py``) says where a reader cannot take what a writer allows;
this module proposes small values there (``Values``: the writer's smallest values, and
values near the edges of both schemas' bounds) and proves a whole document at the end
(``proves``): the writer's root schema accepts it and the reader's rejects it, by
jsonschema-rs, which validates in microseconds where jsonschema takes a tenth of a
millisecond (the tests check every example with jsonschema too). Formats are not asserted,
as validators do not assert them by default.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeGuard

import jsonschema
import jsonschema_rs
from jsonschema.exceptions import UnknownType
from jsonschema.protocols import Validator as ValidatorProtocol
from referencing.exceptions import Unresolvable

from changebroker.registry.compat.model import NOTHING

# Values proposed where a schema says little, in the order a person would try them.
ANY_VALUES: tuple[Any, ...] = (None, False, 0, "", [], {}, 1.5, "a", -1, True)
_STRINGS = ("a", "A", "0", "ab", "abc", "x", "a1", "x-a", "_", "2024-01-01", "aaaaaaaa")
_NAMES = ("a", "x", "x-a", "A", "_", "0", "ab", "S_a", "a_id", "zz")
_TYPE_ORDER = ("null", "boolean", "integer", "number", "string", "array", "object")
_DEPTH = 6  # nesting a proposed value may have: witnesses are small
_FANOUT = 12  # candidates taken from each nested proposal
_KEPT = 4096  # smallest values kept per writer root


def search(pattern: str, text: str) -> bool:
    """``pattern`` matches somewhere in ``text`` (as validators apply ``pattern``); False
    for a pattern Python cannot read."""
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return False


def fresh_name(taken: Mapping[str, Any] | set[str], patterns: list[str]) -> str:
    """A property name neither declared nor matched by any of ``patterns``."""
    for name in itertools.chain(["zz", "z_extra"], (f"z{i}" for i in range(50))):
        if name not in taken and not any(search(p, name) for p in patterns):
            return name
    return "z_extra"


def names_for(pattern: str) -> Iterator[str]:
    """Property names that match ``pattern``: its literal prefix, then a few common ones."""
    literal = re.match(r"\^((?:[A-Za-z0-9_\-]|\\[.\-_/])*)", pattern)
    tried = []
    if literal:
        prefix = literal.group(1).replace("\\", "")
        tried += [prefix, prefix + "a", prefix + "0", prefix + "a_id"]
    tried += list(_NAMES)
    for name in tried:
        if search(pattern, name):
            yield name


class Values:
    """Values a writer's (sub)schema may allow, smallest first, proposed without checking:
    ``accepts`` (the writer's validator on a subschema) keeps those it really allows.

    ``resolve`` follows the writer's $refs; ``prefix_items`` says whether its draft has
    ``prefixItems``. ``hints``, a reader subschema, adds values near the reader's edges."""

    def __init__(
        self,
        resolve: Callable[[Any], Any],
        accepts: Callable[[Any, Any], bool],
        prefix_items: bool,
    ) -> None:
        self.resolve = resolve
        self.accepts = accepts
        self.prefix_items = prefix_items
        self._minimal: dict[int, tuple[Any, Any]] = {}
        self._bases: dict[int, tuple[Any, dict[str, Any] | None]] = {}

    def minimal(self, node: Any, depth: int = 0) -> Any:
        """The first proposal ``node`` accepts, or NOTHING."""
        key = id(node)
        kept = self._minimal.get(key)
        if kept is not None and kept[0] is node:
            return kept[1]
        found = NOTHING
        if depth <= _DEPTH:
            for value in itertools.islice(self.proposals(node, None, depth), 40):
                if self.accepts(node, value):
                    found = value
                    break
        if len(self._minimal) > _KEPT:
            self._minimal.clear()  # the walks' passing nodes: keep what recent checks met
        self._minimal[key] = (node, found)  # the node is kept, so its id is not reused
        return found

    def allowed(self, node: Any, hints: Any = None, depth: int = 0) -> Iterator[Any]:
        """Proposals ``node`` accepts, near both its edges and the ``hints`` schema's."""
        for value in self.proposals(node, hints, depth):
            if self.accepts(node, value):
                yield value

    def proposals(self, node: Any, hints: Any, depth: int) -> Iterator[Any]:
        node = self.resolve(node)
        if node is False or depth > _DEPTH:
            return
        hints = self._flattened(hints)
        if not isinstance(node, Mapping):
            yield from ANY_VALUES
            return
        if "const" in node:
            yield node["const"]
            return
        if isinstance(node.get("enum"), list):
            yield from node["enum"]
            return
        if isinstance(node.get("allOf"), list):
            merged = dict(node)
            for branch in merged.pop("allOf"):
                branch = self.resolve(branch)
                if isinstance(branch, Mapping):
                    merged = {**branch, **merged}
            yield from self.proposals(merged, hints, depth)
            return
        for union in ("anyOf", "oneOf"):
            if isinstance(node.get(union), list):
                rest = {k: v for k, v in node.items() if k != union}
                for branch in node[union]:
                    branch = self.resolve(branch)
                    if isinstance(branch, Mapping):
                        yield from self.proposals({**rest, **branch}, hints, depth)
                return
        # One of each type in turn: a reader that rejects one type shows it in a few tries.
        yield from _round_robin([self.typed(node, k, hints, depth) for k in _kinds(node, hints)])

    def _flattened(self, hints: Any) -> dict[str, Any]:
        """The reader's hint schema with what its branches say merged in: their bounds and
        listed values are edges worth trying."""
        merged: dict[str, Any] = {}
        pending = [hints]
        while pending and len(pending) < 64:
            node = pending.pop()
            node = self.resolve(node) if node is not None else None
            if not isinstance(node, Mapping):
                continue
            for key, value in node.items():
                if key in ("anyOf", "oneOf", "allOf") and isinstance(value, list):
                    pending += value
                elif key == "not":
                    pending.append(value)  # what the reader excludes is worth proposing
                elif key in ("enum", "const"):
                    listed = value if key == "enum" and isinstance(value, list) else [value]
                    merged.setdefault(_LISTED, []).extend(listed)
                else:
                    if key in _EDGES:
                        merged.setdefault(_EDGES_SEEN, {}).setdefault(key, []).append(value)
                    merged.setdefault(key, value)
        return merged

    def typed(
        self, node: Mapping[str, Any], kind: str, hints: Mapping[str, Any], depth: int
    ) -> Iterator[Any]:
        """Proposals of type ``kind`` for ``node``."""
        for value in hints.get(_LISTED, []):
            if _of_kind(value, kind):
                yield value
        if kind == "null":
            yield None
        elif kind == "boolean":
            yield from (False, True)
        elif kind in ("integer", "number"):
            yield from _numbers(node, hints, integer=kind == "integer")
        elif kind == "string":
            yield from _strings(node, hints)
        elif kind == "array":
            yield from self._arrays(node, hints, depth)
        elif kind == "object":
            yield from self._objects(node, hints, depth)

    # -- arrays -----------------------------------------------------------------------

    def item_schema(self, node: Mapping[str, Any], index: int) -> Any:
        """The writer's schema for the item at ``index``."""
        if self.prefix_items:
            prefix, rest = node.get("prefixItems", []), node.get("items", True)
        else:
            items = node.get("items", True)
            prefix, rest = (
                (items, node.get("additionalItems", True))
                if isinstance(items, list)
                else ([], items)
            )
        prefix = prefix if isinstance(prefix, list) else []
        return prefix[index] if index < len(prefix) else rest

    def items(self, node: Mapping[str, Any], size: int, depth: int) -> list[Any] | None:
        """``size`` items, each the smallest its position allows; None if one has none."""
        out = []
        for index in range(size):
            value = self.minimal(self.item_schema(node, index), depth + 1)
            if value is NOTHING:
                return None
            out.append(value)
        return out

    def _arrays(self, node: Mapping[str, Any], hints: Mapping[str, Any], depth: int) -> Any:
        low = _integer(node.get("minItems"), 0)
        sizes = [low, low + 1, _integer(node.get("maxItems"), low + 2)]
        sizes += [_integer(hints.get("minItems"), 1) - 1, _integer(hints.get("maxItems"), 0) + 1]
        for size in dict.fromkeys(s for s in sizes if s >= 0):
            base = self.items(node, size, depth)
            if base is not None:
                yield base
        contains = node.get("contains", hints.get("contains"))
        if contains is not None:
            found = self.minimal(contains, depth + 1)
            if found is not NOTHING:
                least = max(_integer(node.get("minContains"), 1), low, 1)
                yield [found] * least
                yield [found] * max(least, _integer(hints.get("maxContains"), 0) + 1)
        # Items near the edges of the item schema, one at each position the reader may check.
        for size in (1, 2):
            base = self.items(node, max(size, low), depth)
            if base is None:
                continue
            for index in range(size):
                schema = self.item_schema(node, index)
                hint = _item_hint(hints, index, self.prefix_items)
                for value in itertools.islice(self.allowed(schema, hint, depth + 1), _FANOUT):
                    yield [*base[:index], value, *base[index + 1 :]]
        pair = self.items(node, max(2, low), depth)
        if pair is not None and len(pair) >= 2:
            yield [pair[0], *pair[:-1]]  # a duplicate, for uniqueItems
        for size in sizes[2:]:
            distinct = self.distinct_items(node, size, depth)
            if distinct is not None:
                yield distinct

    def distinct_items(self, node: Mapping[str, Any], size: int, depth: int) -> list[Any] | None:
        """``size`` items no two of which are equal (for ``uniqueItems`` writers)."""
        out: list[Any] = []
        seen: set[str] = set()
        for index in range(size):
            proposals = self.allowed(self.item_schema(node, index), None, depth + 1)
            for value in itertools.islice(proposals, 40):
                text = json.dumps(value, sort_keys=True)
                if text not in seen:
                    seen.add(text)
                    out.append(value)
                    break
            else:
                return None
        return out

    # -- objects ----------------------------------------------------------------------

    def property_schema(self, node: Mapping[str, Any], name: str) -> Any:
        """The writer's schema for property ``name`` (declared, pattern, or additional)."""
        properties = node.get("properties")
        if isinstance(properties, Mapping) and name in properties:
            return properties[name]
        patterns = node.get("patternProperties")
        if isinstance(patterns, Mapping):
            for pattern, schema in patterns.items():
                if search(pattern, name):
                    return schema
        return node.get("additionalProperties", True)

    def base_object(self, node: Mapping[str, Any], depth: int) -> dict[str, Any] | None:
        """The writer's required properties, each with its smallest value (a new dict)."""
        key = id(node)
        kept = self._bases.get(key)
        if kept is None or kept[0] is not node:
            kept = (node, self._base_object(node, depth))
            if len(self._bases) > _KEPT:
                self._bases.clear()
            self._bases[key] = kept  # the node is kept, so its id is not reused
        return None if kept[1] is None else dict(kept[1])

    def _base_object(self, node: Mapping[str, Any], depth: int) -> dict[str, Any] | None:
        required = node.get("required", [])
        out: dict[str, Any] = {}
        for name in required if isinstance(required, list) else []:
            if not isinstance(name, str):
                continue
            value = self.minimal(self.property_schema(node, name), depth + 1)
            if value is NOTHING:
                return None
            out[name] = value
        return out

    def _objects(self, node: Mapping[str, Any], hints: Mapping[str, Any], depth: int) -> Any:
        base = self.base_object(node, depth)
        if base is None:
            return
        yield base
        names = list(_declared(node)) + [n for n in _declared(hints) if n not in base]
        patterns = list(node.get("patternProperties", {}) or {})
        for pattern in patterns:
            names += itertools.islice(names_for(pattern), 1)
        names.append(fresh_name(set(names) | set(base), patterns + list(_patterns(hints))))
        for name in dict.fromkeys(names):
            if name in base:
                continue
            schema = self.property_schema(node, name)
            value = self.minimal(schema, depth + 1)
            if value is not NOTHING:
                yield {**base, name: value}
        # Values near the edges of each property the reader declares.
        hinted = hints.get("properties", {}) if isinstance(hints.get("properties"), Mapping) else {}
        for name in list(_declared(node)):
            schema = self.property_schema(node, name)
            for value in itertools.islice(self.allowed(schema, hinted.get(name), depth + 1), 4):
                yield {**base, name: value}
        many = dict(base)
        wanted = max(_integer(hints.get("maxProperties"), 0) + 1, len(names))
        fresh = (f"p{i}" for i in itertools.count())
        for name in itertools.chain(dict.fromkeys(names), fresh):
            if len(many) >= wanted or len(many) > 64:
                break
            value = self.minimal(self.property_schema(node, name), depth + 1)
            if value is not NOTHING:
                many.setdefault(name, value)
        yield many


# Keys ``Values._flattened`` adds: the values the hint lists, and every bound it sets.
_LISTED = "$listed"
_EDGES_SEEN = "$edges"
_EDGES = frozenset(
    {
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
    }
)
_KINDS: dict[str, tuple[type, ...]] = {
    "null": (type(None),),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "array": (list,),
    "object": (dict,),
}


def _of_kind(value: Any, kind: str) -> bool:
    if isinstance(value, bool):
        return kind == "boolean"
    return isinstance(value, _KINDS.get(kind, ()))


def _all_edges(hints: Mapping[str, Any], key: str) -> list[Any]:
    """Every value the hint's branches give ``key``."""
    seen = hints.get(_EDGES_SEEN, {})
    return list(seen.get(key, [])) if isinstance(seen, Mapping) else []


def _round_robin(iterators: list[Iterator[Any]]) -> Iterator[Any]:
    active = list(iterators)
    while active:
        for iterator in list(active):
            try:
                yield next(iterator)
            except StopIteration:
                active.remove(iterator)


def _kinds(node: Mapping[str, Any], hints: Mapping[str, Any]) -> list[str]:
    declared = node.get("type")
    if isinstance(declared, str):
        kinds = [declared]
    elif isinstance(declared, list):
        kinds = [t for t in _TYPE_ORDER if t in declared]
    else:
        implied = _implied(node) or _implied(hints)
        kinds = ([implied] if implied else []) + [t for t in _TYPE_ORDER if t != implied]
    if "number" in kinds and "integer" not in kinds:
        kinds.insert(kinds.index("number"), "integer")
    return kinds


def _implied(node: Mapping[str, Any]) -> str | None:
    if any(k in node for k in ("properties", "required", "patternProperties", "propertyNames")):
        return "object"
    if any(k in node for k in ("items", "prefixItems", "minItems", "maxItems", "contains")):
        return "array"
    if any(k in node for k in ("minLength", "maxLength", "pattern", "format")):
        return "string"
    if any(k in node for k in ("minimum", "maximum", "multipleOf", "exclusiveMinimum")):
        return "number"
    return None


def _declared(node: Mapping[str, Any]) -> list[str]:
    """The property names ``node`` declares, requires, or names in its dependencies."""
    properties = node.get("properties")
    names = list(properties) if isinstance(properties, Mapping) else []
    listed = [node.get("required")]
    for keyword in ("dependencies", "dependentRequired", "dependentSchemas"):
        dependencies = node.get(keyword)
        if isinstance(dependencies, Mapping):
            listed.append(list(dependencies))
            listed += [v for v in dependencies.values() if isinstance(v, list)]
    for names_listed in listed:
        if isinstance(names_listed, list):
            names += [n for n in names_listed if isinstance(n, str) and n not in names]
    return names


def _patterns(node: Mapping[str, Any]) -> list[str]:
    patterns = node.get("patternProperties")
    return list(patterns) if isinstance(patterns, Mapping) else []


def _item_hint(hints: Mapping[str, Any], index: int, prefix_items: bool) -> Any:
    prefix = hints.get("prefixItems" if prefix_items else "items")
    if isinstance(prefix, list):
        return prefix[index] if index < len(prefix) else None
    return hints.get("items")


def _integer(value: Any, fallback: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else fallback


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numbers(node: Mapping[str, Any], hints: Mapping[str, Any], *, integer: bool) -> Iterator[Any]:
    edges: list[Any] = [0, 1, -1] if integer else [0, 1.5, 1, -1]
    for source in (node, hints):
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            for bound in [source.get(key), *_all_edges(source, key)]:
                if _number(bound):
                    edges += [bound, bound - 1, bound + 1, bound - 0.5, bound + 0.5]
        for key, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
            if source.get(exclusive) is True and _number(source.get(key)):
                edges += [source[key] + 0.25, source[key] - 0.25]
        step = source.get("multipleOf")
        if _number(step) and step > 0:
            edges += [step * k for k in (1, 2, 3, 5, 7, -1)]
            low = source.get("minimum", source.get("exclusiveMinimum"))
            if _number(low):
                start = int(low // step)
                edges += [step * k for k in range(start, start + 4)]
    edges += [2, 3, 0.5, 1.5, 10**9, -(10**9)]
    seen: set[tuple[type, Any]] = set()
    for value in edges:
        if integer:
            if not float(value).is_integer():
                continue
            value = int(value)
        seen_key = (type(value), value)
        if seen_key not in seen:
            seen.add(seen_key)
            yield value


def _strings(node: Mapping[str, Any], hints: Mapping[str, Any]) -> Iterator[str]:
    lengths = [0]
    for source in (node, hints):
        for key in ("minLength", "maxLength"):
            value = source.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                lengths += [value, value - 1, value + 1]
    seen: set[str] = set()
    for text in itertools.chain(
        [""],
        _STRINGS,
        *(("a" * n, "0" * n, "x" * n) for n in lengths if 0 <= n <= 256),
        _pattern_strings(node.get("pattern")),
    ):
        if text not in seen:
            seen.add(text)
            yield text


def _pattern_strings(pattern: Any) -> Iterator[str]:
    if isinstance(pattern, str):
        yield from names_for(pattern)


# -- the proof --------------------------------------------------------------------------

_RUST_VALIDATORS: dict[type[ValidatorProtocol], Any] = {
    jsonschema.Draft4Validator: jsonschema_rs.Draft4Validator,
    jsonschema.Draft6Validator: jsonschema_rs.Draft6Validator,
    jsonschema.Draft7Validator: jsonschema_rs.Draft7Validator,
    jsonschema.Draft201909Validator: jsonschema_rs.Draft201909Validator,
    jsonschema.Draft202012Validator: jsonschema_rs.Draft202012Validator,
}

# Compiled root schemas by identity, each kept with its schema so no other takes its id: the
# registry keeps a subject's history as the same objects from check to check.
_COMPILED: OrderedDict[int, tuple[Any, Callable[[Any], bool | None]]] = OrderedDict()
_COMPILED_MAX = 512
_COMPILED_LOCK = threading.Lock()  # the broker may check from several threads


def accepts(root: Any, document: Any, draft: type[ValidatorProtocol]) -> bool | None:
    """Whether ``root`` (of ``draft``) accepts ``document``; None if it cannot tell (a
    reference it cannot follow, a pattern it cannot read)."""
    if root is True or root is False:
        return root
    with _COMPILED_LOCK:
        kept = _COMPILED.get(id(root))
        if kept is None or kept[0] is not root:
            kept = (root, _compile(root, draft))
            _COMPILED[id(root)] = kept
            if len(_COMPILED) > _COMPILED_MAX:
                _COMPILED.popitem(last=False)
        else:
            _COMPILED.move_to_end(id(root))
    return kept[1](document)


def _compile(root: Any, draft: type[ValidatorProtocol]) -> Callable[[Any], bool | None]:
    rust = _RUST_VALIDATORS.get(draft)
    if rust is not None:
        try:
            compiled = rust(root, validate_formats=False, offline=True)
            return functools.partial(_rust_is_valid, compiled)
        except (ValueError, TypeError, OverflowError, jsonschema_rs.ReferencingError):
            pass  # jsonschema judges what jsonschema-rs cannot compile (a Python-only pattern)
    return functools.partial(_python_is_valid, draft(root))


def _rust_is_valid(compiled: Any, document: Any) -> bool | None:
    try:
        return bool(compiled.is_valid(document))
    except (ValueError, TypeError, OverflowError):
        return None


def _python_is_valid(validator: ValidatorProtocol, document: Any) -> bool | None:
    try:
        return bool(validator.is_valid(document))
    except (UnknownType, Unresolvable, TypeError, re.error, RecursionError):
        return None
