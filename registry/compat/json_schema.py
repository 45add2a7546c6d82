"""JSON Schema compatibility by structural comparison, in reader/writer terms.

``json_schema_violations(reader, writer)`` answers: is every document valid
under ``writer`` accepted by ``reader``? The comparison walks both schemas side
by side. It is conservative: when it cannot prove acceptance it reports a
violation, so an empty list is a guarantee while a violation may, in rare
corner cases (overlapping ``oneOf``s, conditionals, ``unevaluated*`` beside
branches), be a false alarm. Each violation carries the document that shows it
where the engine finds and proves one (``json_witness.py``); a false alarm never
does.

Two approximations keep it sound:
* the writer is only ever replaced by something looser (a dropped keyword
  allows more documents), so "the reader accepts the looser writer" still
  implies it accepts the real one;
* where the writer allows a finite set of values (``enum``, ``const``,
  ``boolean``, ``null``) each value is validated against the reader exactly.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import jsonschema
from jsonschema.exceptions import UnknownType
from jsonschema.protocols import Validator as ValidatorProtocol
from referencing.exceptions import Unresolvable

from changebroker.numerals import whole_number
from changebroker.registry.compat.json_evaluation import ITEMS_MARK, PROPERTIES_MARK, Evaluation
from changebroker.registry.compat.json_witness import Values, accepts, fresh_name, names_for, search
from changebroker.registry.compat.model import (
    NOTHING,
    PairWalk,
    Pending,
    Shown,
    Violation,
    just,
    pending,
    placed,
    settle,
)
from changebroker.registry.compat.rules import Rule

# Keywords that never change which documents are valid.
ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "examples",
        "example",
        "default",
        "$comment",
        "readOnly",
        "writeOnly",
        "deprecated",
        "$id",
        "id",
        "$schema",
        "definitions",
        "$defs",
        "$anchor",
        "contentMediaType",
        "contentEncoding",
    }
)

# Keywords compared by a dedicated rule; any other reader keyword must be unchanged.
_HANDLED = frozenset(
    {
        "$ref",
        "type",
        "enum",
        "const",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "if",
        "then",
        "else",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "items",
        "prefixItems",
        "additionalItems",
        "minItems",
        "maxItems",
        "uniqueItems",
        "properties",
        "patternProperties",
        "additionalProperties",
        "required",
        "minProperties",
        "maxProperties",
        "contains",
        "minContains",
        "maxContains",
        "propertyNames",
        "dependencies",
        "dependentRequired",
        "dependentSchemas",
    }
)

# Dynamic references resolve against the whole document's dynamic scope: equal values on
# both sides do not mean equal constraints, so the engine accepts them only where the reader
# and writer nodes are the same.
_CONTEXTUAL = frozenset({"$dynamicRef", "$recursiveRef"})

# Keywords some drafts have and others do not: where a schema's draft lacks one, validators
# ignore it, and so does the comparison (``items``/``prefixItems``/``additionalItems`` are
# read by draft in ``_tuple_form``).
_DRAFT_KEYWORDS = frozenset(
    {
        "const",
        "contains",
        "minContains",
        "maxContains",
        "propertyNames",
        "if",
        "then",
        "else",
        "dependencies",
        "dependentRequired",
        "dependentSchemas",
        "unevaluatedProperties",
        "unevaluatedItems",
        "$dynamicRef",
        "$recursiveRef",
    }
)


@functools.cache
def _known_keywords(draft: type[ValidatorProtocol]) -> frozenset[str]:
    """The keywords ``draft``'s validators apply (``then``/``else`` with ``if``, and
    ``minContains``/``maxContains`` with ``contains`` from draft 2019-09 on)."""
    known = set(draft.VALIDATORS)
    if "if" in known:
        known |= {"then", "else"}
    if "unevaluatedItems" in known:
        known |= {"minContains", "maxContains"}
    return frozenset(known)


_UNEVALUATED = ("unevaluatedProperties", "unevaluatedItems")
_DEPENDENCIES = frozenset({"dependencies", "dependentRequired", "dependentSchemas"})
# Drafts whose "integer" excludes 1.0.
_INTEGRAL_FLOATS_ARE_NUMBERS = frozenset({jsonschema.Draft3Validator, jsonschema.Draft4Validator})
# Proposals looked at for one violation's example before giving up on it.
_PROPOSALS = 150
_NUMBER_KEYWORDS = frozenset(
    {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)

_ALL_TYPES = frozenset({"null", "boolean", "object", "array", "number", "integer", "string"})
_NUMERIC = frozenset({"number", "integer"})

# (keyword, rule, is_lower_bound) for the plain integer bounds of strings, arrays and objects.
_SIZE_BOUNDS: dict[str, list[tuple[str, Rule, bool]]] = {
    "string": [
        ("minLength", Rule.MIN_LENGTH_TIGHTENED, True),
        ("maxLength", Rule.MAX_LENGTH_TIGHTENED, False),
    ],
    "array": [
        ("minItems", Rule.MIN_ITEMS_TIGHTENED, True),
        ("maxItems", Rule.MAX_ITEMS_TIGHTENED, False),
    ],
    "object": [
        ("minProperties", Rule.MIN_PROPERTIES_TIGHTENED, True),
        ("maxProperties", Rule.MAX_PROPERTIES_TIGHTENED, False),
    ],
}


# Whether (reader subschema, writer subschema), by identity, are the same text without a $ref;
# each entry holds the pair, so no other object takes their ids while the entry lives.
UnchangedPairs = dict[tuple[int, int], tuple[bool, Any, Any]]


def json_schema_violations(
    reader: Mapping[str, Any],
    writer: Mapping[str, Any],
    unchanged: UnchangedPairs | None = None,
    *,
    examples: bool = True,
    shown: Shown | None = None,
) -> list[Violation]:
    """[] iff every document valid under ``writer`` is accepted by ``reader`` (conservative).

    Both must be valid JSON Schemas (check them with ``validator_class(s).check_schema``
    first); keywords of the wrong shape are not second-guessed here.

    ``unchanged`` carries what one comparison learnt to the next (one check's comparisons
    share it): checking one schema against a history whose versions share their unchanged
    subtrees as one object each (``share_subtrees``) then compares each shared subtree once.

    Each violation carries, where the engine finds one, a document the writer accepts and the
    reader rejects (``proven``); ``examples=False`` builds none. ``shown``, shared like
    ``unchanged``, lets a check try the example one comparison proved in the next one first.
    """
    try:
        comparison = _Comparison(reader, writer, {} if unchanged is None else unchanged)
        found = comparison.compare(reader, writer, "#")
    except RecursionError:
        return [
            Violation(
                "#",
                Rule.SCHEMA_TOO_DEEP,
                "the schemas nest too deeply to compare; flatten them with definitions and $ref",
            )
        ]
    unique: dict[tuple[str, str, str], Violation] = {}
    for violation in found:
        unique.setdefault((violation.path, violation.rule, violation.message), violation)
    return settle(list(unique.values()), comparison.proves if examples else None, shown)


# Where a schema holds subschemas: maps of them, lists of them, and one subschema.
SCHEMA_MAPS = ("properties", "patternProperties", "definitions", "$defs", "dependentSchemas")
SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
SCHEMA_VALUES = (
    "items",
    "additionalItems",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
)


def strip_annotations(schema: Any) -> Any:
    """``schema`` without titles, descriptions and other annotations, at schema positions only."""
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ANNOTATIONS and key not in ("definitions", "$defs"):
            continue
        if key.startswith("x-"):
            continue
        if key in SCHEMA_MAPS:
            out[key] = (
                {k: strip_annotations(v) for k, v in value.items()}
                if isinstance(value, Mapping)
                else value
            )
        elif key in SCHEMA_LISTS or (key == "items" and isinstance(value, list)):
            out[key] = [strip_annotations(v) for v in value] if isinstance(value, list) else value
        elif key in SCHEMA_VALUES:
            out[key] = strip_annotations(value)
        else:
            out[key] = value
    return out


def _pointer(path: str, *tokens: str | int) -> str:
    for token in tokens:
        path += "/" + str(token).replace("~", "~0").replace("/", "~1")
    return path


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _identical_without_ref(a: Any, b: Any) -> bool:
    """``a`` and ``b`` are the same JSON text up to key order (``_canonical(a) ==
    _canonical(b)``) with no "$ref" key anywhere, found in one walk without serialising:
    ``==`` alone takes ``1`` for ``true`` and ``1.0``, and comparing the texts cost a third
    of a compatibility check."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        if "$ref" in a or a.keys() != b.keys():
            return False
        for key, value in a.items():  # noqa: SIM110 - a loop runs faster than all() here
            if not _identical_without_ref(value, b[key]):
                return False
        return True
    if type(a) is list:
        return len(a) == len(b) and all(map(_identical_without_ref, a, b))
    if type(a) is float:
        return repr(a) == repr(b)  # the text json writes: -0.0 and 0.0 differ, nan equals nan
    return bool(a == b)


def share_subtrees(values: Sequence[Any]) -> list[Any]:
    """``values`` (decoded JSON) with each subtree of the same text one shared object, in
    and across them: a check against a history loaded this way compares each subtree the
    versions share once (see ``json_schema_violations``). Nothing may change the result."""
    shared: dict[tuple[Any, ...], Any] = {}

    def key(value: Any) -> Any:  # children are shared already: an id stands for a text
        if type(value) is dict or type(value) is list:
            return id(value)
        # The type keeps true, 1 and 1.0 apart; repr keeps -0.0 and 0.0 apart.
        return (type(value), repr(value) if type(value) is float else value)

    def share(value: Any) -> Any:
        if type(value) is dict:
            members = {name: share(child) for name, child in value.items()}
            text = ("{", *((name, key(child)) for name, child in members.items()))
            return shared.setdefault(text, members)
        if type(value) is list:
            items = [share(child) for child in value]
            return shared.setdefault(("[", *(key(child) for child in items)), items)
        return value

    try:
        return [share(value) for value in values]
    except RecursionError:
        # Nested deeper than this walk's two frames a level allow (a stored schema can be):
        # the values as they are, which the comparison takes or calls too deep.
        return list(values)


def _without_ref(node: Any) -> bool:
    """A boolean schema, or an object one without "$ref": most nodes, told apart from the
    rest without a Mapping check, which costs as much as the rest of the lookup."""
    return type(node) is bool or (type(node) is dict and "$ref" not in node)


def _is_trivial(node: Any) -> bool:
    """True for schemas that accept every document."""
    if node is True:
        return True
    return isinstance(node, Mapping) and all(k in ANNOTATIONS or k.startswith("x-") for k in node)


def _without_twins(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` without the ``oneOf`` branches that appear twice: a document one of them takes,
    its twin takes too, so ``oneOf`` rejects it (none left: the node accepts nothing)."""
    branches = node.get("oneOf")
    if not isinstance(branches, list) or len(branches) < 2:
        return node
    texts = [_canonical(branch) for branch in branches]
    kept = [b for b, text in zip(branches, texts, strict=True) if texts.count(text) == 1]
    if len(kept) == len(branches):
        return node
    if not kept:
        return {"not": {}}
    return {**node, "oneOf": kept}


def _may_be_empty(node: Any) -> bool:
    """Worth asking ``_writer_empty`` (a quick look, most property schemas are not)."""
    return node is False or (
        type(node) is dict and ("not" in node or "oneOf" in node or "$ref" in node)
    )


def _accepts_nothing(node: Any) -> bool:
    """``{"not": {}}`` and ``{"not": true}``: a schema that rejects every document, as
    ``false`` does."""
    return type(node) is dict and "not" in node and _is_trivial(node["not"])


def _types(node: Mapping[str, Any]) -> frozenset[str] | None:
    declared = node.get("type")
    if declared is None:
        return None
    if isinstance(declared, str):
        return frozenset({declared})
    return frozenset(t for t in declared if isinstance(t, str))


def _accepts_type(reader_types: frozenset[str] | None, writer_type: str) -> bool:
    if reader_types is None:
        return True
    return writer_type in reader_types or (writer_type == "integer" and "number" in reader_types)


def _bounds(node: Mapping[str, Any], keyword: str) -> list[tuple[Any, bool, str]]:
    """``keyword`` (minimum or maximum) and its exclusive form, each as (value, exclusive,
    keyword): draft 4's boolean exclusiveMinimum and draft 6+'s numeric one."""
    exclusive_keyword = "exclusive" + keyword.capitalize()
    bounds: list[tuple[Any, bool, str]] = []
    if isinstance(node.get(keyword), int | float) and not isinstance(node[keyword], bool):
        bounds.append((node[keyword], node.get(exclusive_keyword) is True, keyword))
    exclusive = node.get(exclusive_keyword)
    if isinstance(exclusive, int | float) and not isinstance(exclusive, bool):
        bounds.append((exclusive, True, exclusive_keyword))
    return bounds


def _lower(node: Mapping[str, Any]) -> tuple[Any, bool, str] | None:
    """The tightest lower numeric bound as (value, exclusive, keyword)."""
    bounds = _bounds(node, "minimum")
    return max(bounds, key=lambda b: (b[0], b[1])) if bounds else None


def _upper(node: Mapping[str, Any]) -> tuple[Any, bool, str] | None:
    """The tightest upper numeric bound as (value, exclusive, keyword)."""
    bounds = _bounds(node, "maximum")
    return min(bounds, key=lambda b: (b[0], not b[1])) if bounds else None


def _tuple_form(node: Mapping[str, Any], *, prefix_items: bool) -> tuple[list[Any], Any]:
    """Array items as (positional schemas, schema for the rest): ``prefixItems`` and ``items``
    in draft 2020-12, an ``items`` list and ``additionalItems`` before (where ``prefixItems``
    is no keyword at all, so it constrains nothing)."""
    if prefix_items:
        prefix = node.get("prefixItems", [])
        return list(prefix) if isinstance(prefix, list) else [], node.get("items", True)
    items = node.get("items", True)
    if isinstance(items, list):
        return list(items), node.get("additionalItems", True)
    return [], items


def validator_class(root: Any, text: str | None = None) -> type[ValidatorProtocol]:
    """The jsonschema validator for ``root``: its $schema, else the draft its spelling implies.
    ``text``: ``root`` as JSON with sorted keys and no spaces, when the caller has it."""
    # Draft 4 spells exclusive bounds as booleans; later drafts as numbers. Without a
    # $schema, pick the draft whose spelling the schema uses.
    default: type[ValidatorProtocol] = jsonschema.Draft7Validator
    if text is None:
        text = _canonical(root)
    if '"exclusiveMinimum":true' in text or '"exclusiveMaximum":true' in text:
        default = jsonschema.Draft4Validator
    if isinstance(root, Mapping) and isinstance(root.get("$schema", ""), str):
        return jsonschema.validators.validator_for(root, default=default)
    return default  # a $schema that is no string: the default draft's check refuses it


def _resolve(root: Any, ref: str) -> Any:
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return None
    node = root
    for raw in ref[2:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and token in node:
            node = node[token]
        elif isinstance(node, list) and whole_number(token) and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node


class _Root:
    """What one root schema's comparisons need beyond the schema: its draft, its validator,
    and the values it allows as a writer. The registry checks against the same history
    objects again and again, so these are kept per root (``_root``)."""

    def __init__(self, root: Any) -> None:
        self.root = root

    @functools.cached_property
    def draft(self) -> type[ValidatorProtocol]:
        return validator_class(self.root)

    @functools.cached_property
    def validator(self) -> ValidatorProtocol:
        return self.draft(self.root)

    @functools.cached_property
    def prefix_items(self) -> bool:
        """Does the draft know ``prefixItems`` (2020-12 and later)?"""
        return "prefixItems" in self.draft.VALIDATORS

    @functools.cached_property
    def ref_has_siblings(self) -> bool:
        """From draft 2019-09 on, the keywords beside a $ref constrain too."""
        return "unevaluatedProperties" in self.draft.VALIDATORS

    @functools.cached_property
    def values(self) -> Values:
        return Values(self.writer_node, self.accepts, self.prefix_items)

    def accepts(self, node: Any, value: Any) -> bool:
        return _is_valid(self.validator.evolve(schema=_for_value(node, value)), value)

    def writer_node(self, node: Any) -> Any:
        """Resolve local $refs; an unresolvable one allows anything (a looser writer is safe).
        From draft 2019-09 on, the keywords beside a $ref constrain too (before, validators
        ignore them)."""
        if _without_ref(node):
            return node
        for _ in range(64):
            if not (isinstance(node, Mapping) and isinstance(node.get("$ref"), str)):
                return node
            target = _resolve(self.root, node["$ref"])
            if target is None:
                return True
            siblings = {k: v for k, v in node.items() if k != "$ref" and k not in ANNOTATIONS}
            if not siblings or not self.ref_has_siblings:
                node = target
                continue
            beside = {k: siblings.pop(k) for k in _UNEVALUATED if k in siblings}
            return {"allOf": [target, siblings], **beside}
        return True


_ROOTS: OrderedDict[int, _Root] = OrderedDict()
_ROOTS_MAX = 256
_ROOTS_LOCK = threading.Lock()  # the broker may check from several threads


def _root(root: Any) -> _Root:
    """The ``_Root`` of ``root``, kept by identity (it holds the schema, so no other object
    takes its id while it is kept)."""
    with _ROOTS_LOCK:
        kept = _ROOTS.get(id(root))
        if kept is not None and kept.root is root:
            _ROOTS.move_to_end(id(root))
            return kept
        kept = _ROOTS[id(root)] = _Root(root)
        if len(_ROOTS) > _ROOTS_MAX:
            _ROOTS.popitem(last=False)
        return kept


class _Comparison:
    def __init__(self, reader_root: Any, writer_root: Any, unchanged: UnchangedPairs) -> None:
        self.reader_root = reader_root
        self.writer_root = writer_root
        self.reader = _root(reader_root)
        self.writer = _root(writer_root)
        self._writer_node = self.writer.writer_node  # the hottest call of a walk: no detour
        self.unchanged = unchanged
        # (reader node, writer node) pairs under comparison: a recursive $ref that
        # comes back to one of them is assumed compatible (the rest of the walk decides).
        self.pairs = PairWalk()

    @property
    def reader_draft(self) -> type[ValidatorProtocol]:
        return self.reader.draft

    @property
    def writer_draft(self) -> type[ValidatorProtocol]:
        return self.writer.draft

    @property
    def reader_prefix_items(self) -> bool:
        return self.reader.prefix_items

    @property
    def writer_prefix_items(self) -> bool:
        return self.writer.prefix_items

    @property
    def reader_validator(self) -> ValidatorProtocol:
        return self.reader.validator

    @property
    def writer_validator(self) -> ValidatorProtocol:
        return self.writer.validator

    # -- examples -----------------------------------------------------------------------

    def proves(self, document: Any) -> bool:
        """The writer's root schema accepts ``document`` and the reader's rejects it."""
        if (
            accepts(self.writer_root, document, self.writer_draft) is True
            and accepts(self.reader_root, document, self.reader_draft) is False
        ):
            return True
        # jsonschema-rs tests multipleOf exactly, jsonschema in binary floating point (0.6 is
        # no multiple of 0.1 there), as this engine does: a fraction gets jsonschema's word.
        return (
            _has_fraction(document)
            and _is_valid(self.writer_validator, document)
            and not _may_be_valid(self.reader_validator, document)
        )

    @property
    def values(self) -> Values:
        return self.writer.values

    def _writer_accepts(self, node: Any, value: Any) -> bool:
        return self.writer.accepts(node, value)

    def _reader_rejects(self, node: Any, value: Any) -> bool:
        return not _may_be_valid(
            self.reader_validator.evolve(schema=_for_value(node, value)), value
        )

    def _search(self, rejecting: Any, w: Any, first: Iterable[Any] = ()) -> Iterator[Any]:
        """Values ``w`` allows (``first``, then proposals near both schemas' edges) that the
        reader subschema ``rejecting`` rejects: where ``rejecting`` is a part of the reader
        at this place (a keyword, a branch), the whole reader rejects them too."""
        proposals = itertools.chain(first, self.values.allowed(w, rejecting))
        for value in itertools.islice(proposals, _PROPOSALS):
            if self._reader_rejects(rejecting, value):
                yield value

    def _example(self, violation: Violation, rejecting: Any, w: Any) -> Violation:
        """``violation`` with the values of ``w`` that ``rejecting`` rejects as its example."""
        return pending(violation, lambda: self._search(rejecting, w))

    def _in_object(self, w: Mapping[str, Any], name: str) -> Callable[[Any], Any]:
        """Places a value of property ``name`` in the writer's smallest object around it."""

        def build(value: Any) -> Any:
            base = self.values.base_object(w, 0)
            return NOTHING if base is None else {**base, name: value}

        return build

    def _in_array(self, w: Mapping[str, Any], index: int) -> Callable[[Any], Any]:
        """Places an item at ``index`` in the writer's smallest array around it."""

        def build(value: Any) -> Any:
            low = w.get("minItems", 0) if isinstance(w.get("minItems"), int) else 0
            items = self.values.items(w, max(index + 1, low), 0)
            if items is None:
                return NOTHING
            items[index] = value
            return items

        return build

    def _same(self, r: Any, w: Any, *, annotations_matter: bool = False) -> bool:
        """``r`` and ``w`` allow the same documents because they are the same text without a
        $ref (which may point at different definitions in each root)."""
        if not annotations_matter:
            r, w = strip_annotations(r), strip_annotations(w)
        return _identical_without_ref(r, w)

    def _unchanged(self, reader: Any, writer: Any) -> bool:
        """The same schema on both sides, needing no walk: most of a new version is its
        predecessor unchanged, and the checks ask this first of every subschema pair."""
        if type(reader) is not dict or reader != writer:
            return False
        key = (id(reader), id(writer))
        known = self.unchanged.get(key)
        if known is not None:
            return known[0]
        # The pair is kept with the answer: a comparison's temporary schemas (merged
        # branches) are freed as it goes on, and a later one could reuse an id.
        found = _identical_without_ref(reader, writer)
        self.unchanged[key] = (found, reader, writer)
        return found

    # -- references -------------------------------------------------------------------

    def _reader_node(self, node: Any) -> Any:
        """Resolve local $refs; siblings of $ref still constrain (a stricter reader is safe)."""
        if _without_ref(node):
            return node
        for _ in range(64):
            if not (isinstance(node, Mapping) and isinstance(node.get("$ref"), str)):
                return node
            target = _resolve(self.reader_root, node["$ref"])
            if target is None:
                return node
            siblings = {k: v for k, v in node.items() if k != "$ref" and k not in ANNOTATIONS}
            # unevaluated* sees what the target evaluates: it stays beside the pair.
            beside = {k: siblings.pop(k) for k in _UNEVALUATED if k in siblings}
            node = {"allOf": [target, siblings], **beside} if siblings or beside else target
        return node

    # -- entry ------------------------------------------------------------------------

    def compare(self, reader: Any, writer: Any, path: str) -> list[Violation]:
        if self._unchanged(reader, writer):
            return []
        if (
            isinstance(reader, Mapping)
            and isinstance(writer, Mapping)
            and reader.get("$ref") == writer.get("$ref") is not None
            and _resolve(self.reader_root, reader["$ref"]) is None
        ):
            # The same external reference on both sides: the same schema, not ours to check.
            return []
        r = self._reader_node(reader)
        w = self._writer_node(writer)
        if isinstance(r, Mapping) and isinstance(r.get("$ref"), str):
            return [
                Violation(
                    path,
                    Rule.REF_UNRESOLVED,
                    f"the reader refers to {r['$ref']!r}, which is not a local definition,"
                    " so nothing can be promised about it",
                ),
            ]
        return self.pairs.compare(r, w, lambda: self._compare(r, w, path))

    def _compare(self, r: Any, w: Any, path: str) -> list[Violation]:
        if w is False or _accepts_nothing(w) or _is_trivial(r):
            return []
        if r is False:
            return [
                self._example(
                    Violation(
                        path,
                        Rule.SCHEMA_FALSE,
                        "the reader accepts nothing here but the writer allows values",
                    ),
                    False,
                    w,
                )
            ]
        if w is True:
            w = {}
        if not isinstance(r, Mapping) or not isinstance(w, Mapping):
            return [
                Violation(
                    path,
                    Rule.SCHEMA_INVALID,
                    "a schema here is neither an object nor a boolean; fix the schema",
                )
            ]
        if self._unchanged(r, w):  # again after resolving references
            return []

        r, w = self._reader_model(r), self._writer_model(w)
        if self._writer_empty(w):
            return []
        # A reader union, negation or conditional the writer has too (the same, or a oneOf of
        # branches each equal in effect) holds for every writer document: the reader's goes,
        # the writer's stays (it still narrows what the writer allows).
        for keyword in ("oneOf", "anyOf", "not"):
            if keyword in r and keyword in w and self._same(r[keyword], w[keyword]):
                del r[keyword]
        if "oneOf" in r and "oneOf" in w and self._equivalent_branches(r["oneOf"], w["oneOf"]):
            del r["oneOf"]
        if "anyOf" in r and any(self._same(branch, w) for branch in r["anyOf"]):
            del r["anyOf"]  # the writer is one of the branches
        if ("if" in r or "if" in w) and all(
            self._same(r.get(k), w.get(k)) for k in ("if", "then", "else")
        ):
            for k in ("if", "then", "else"):
                r.pop(k, None)

        # The writer first: reduce it to one branch without combinators.
        found: list[Violation] = []
        if "allOf" in w:
            merged = self._merge([{k: v for k, v in w.items() if k != "allOf"}, *w["allOf"]])
            return self.compare(r, merged, path)
        for union in ("anyOf", "oneOf"):
            if union in w:
                rest = {k: v for k, v in w.items() if k != union}
                for branch in w[union]:
                    found += self.compare(r, self._merge([rest, branch]), path)
                return found
        writer_not = w.get("not")  # what the writer excludes, for the reader's own "not"
        for dropped in ("not", "if", "then", "else"):
            w.pop(dropped, None)
        w = self._narrowed_types(w, writer_not)
        if w is False:
            return []
        writer_types = _types(w)
        if writer_types and len(writer_types) > 1 and ("anyOf" in r or "oneOf" in r):
            # A union reader may take each writer type with another branch: one at a time.
            for single in sorted(writer_types):
                found += self.compare(r, {**w, "type": single}, path)
            return found

        finite = self._finite_values(w, writer_not)
        if finite is not None:
            return self._check_values(r, finite, path)

        # Then the reader's combinators, each against the whole (now simple) writer.
        if "allOf" in r:
            for index, branch in enumerate(r.pop("allOf")):
                found += self.compare(branch, w, _pointer(path, "allOf", index))
        if "anyOf" in r:
            found += self._union(r.pop("anyOf"), w, _pointer(path, "anyOf"), exclusive=False)
        if "oneOf" in r:
            found += self._union(r.pop("oneOf"), w, _pointer(path, "oneOf"), exclusive=True)
        if "not" in r:
            negated = r.pop("not")
            if not self._disjoint(w, negated) and not self._excluded(negated, writer_not):
                found.append(
                    self._example(
                        Violation(
                            _pointer(path, "not"),
                            Rule.NOT_OVERLAPS,
                            "the reader's 'not' may exclude documents the writer allows",
                        ),
                        {"not": negated},
                        w,
                    )
                )
        if "if" in r or "then" in r or "else" in r:
            conditional = {k: r.pop(k) for k in ("if", "then", "else") if k in r}
            found.append(
                self._example(
                    Violation(
                        _pointer(path, "if"),
                        Rule.CONDITIONAL_CHANGED,
                        "the reader's if/then/else differs from the writer's, so documents the"
                        " writer allows may fail it",
                    ),
                    conditional,
                    w,
                )
            )
        return found + self._keywords(r, w, path)

    def _narrowed_types(self, w: dict[str, Any], writer_not: Any) -> dict[str, Any] | bool:
        """The writer's types less those its ``not`` excludes outright (``{"not": {"type":
        "string"}}``), and ``number`` that is a multiple of a whole number read as ``integer``
        (from draft 6 on); False when no type is left."""
        if writer_not is None and "multipleOf" not in w:
            return w
        types = _types(w)
        negated = self._writer_node(writer_not) if writer_not is not None else None
        if isinstance(negated, Mapping) and set(negated) - ANNOTATIONS == {"type"}:
            excluded = _types(negated) or frozenset()
            if "number" in excluded:
                excluded |= {"integer"}
            left = [t for t in sorted(types or _ALL_TYPES) if t not in excluded]
            if "integer" in excluded and "number" in left:
                left = sorted(types or _ALL_TYPES)  # numbers less integers: no type says that
            if not left:
                return False
            w = {**w, "type": left}
            types = frozenset(left)
        step = w.get("multipleOf")
        if (
            types is not None
            and "number" in types
            and isinstance(step, int | float)
            and not isinstance(step, bool)
            and float(step).is_integer()
            and self._integral_floats_are_integers
        ):
            w = {**w, "type": sorted((types - {"number"}) | {"integer"})}
        return w

    def _equivalent_branches(self, reader: Any, writer: Any) -> bool:
        """Each reader branch allows what the writer's branch at its place allows, no more and
        no less: the two oneOfs then allow the same documents."""
        if (
            not isinstance(reader, list)
            or not isinstance(writer, list)
            or len(reader) != len(writer)
        ):
            return False
        swapped = _Comparison(self.writer_root, self.reader_root, {})
        return all(
            not self.compare(r, w, "#") and not swapped.compare(w, r, "#")
            for r, w in zip(reader, writer, strict=True)
        )

    def _excluded(self, negated: Any, writer_not: Any) -> bool:
        """Every document the reader's ``not`` excludes, the writer's excludes too: then no
        writer document is one the reader's excludes (``{"not": number}`` reads
        ``{"not": integer}``... the other way round)."""
        if writer_not is None:
            return False
        # negated ⊆ writer_not: writer_not, read as a reader, takes all that negated allows.
        swapped = _Comparison(self.writer_root, self.reader_root, {})
        return not swapped.compare(writer_not, negated, "#")

    def _reader_model(self, r: Mapping[str, Any]) -> dict[str, Any]:
        """The reader node as the comparison reads it: keywords its draft does not know are
        no constraint, and ``unevaluated*`` is spelt with the keywords beside it."""
        node = dict(r)
        if not _DRAFT_KEYWORDS.isdisjoint(node):
            known = _known_keywords(self.reader_draft)
            node = {k: v for k, v in node.items() if k not in _DRAFT_KEYWORDS or k in known}
        if "unevaluatedProperties" in node or "unevaluatedItems" in node:
            node = Evaluation(self._reader_node, self.reader_prefix_items).model(node, reader=True)
        return _without_twins(node)

    def _writer_model(self, w: Mapping[str, Any]) -> dict[str, Any]:
        """As ``_reader_model``, for the writer: an ``unevaluated*`` the comparison cannot spell
        exactly is dropped (the writer then allows more, which is safe)."""
        node = dict(w)
        if not _DRAFT_KEYWORDS.isdisjoint(node):
            known = _known_keywords(self.writer_draft)
            node = {k: v for k, v in node.items() if k not in _DRAFT_KEYWORDS or k in known}
        if "unevaluatedProperties" in node or "unevaluatedItems" in node:
            node = Evaluation(self._writer_node, self.writer_prefix_items).model(node, reader=False)
        return _without_twins(node)

    def _writer_empty(self, w: Any, depth: int = 0) -> bool:
        """The writer allows no document here: ``false``, ``{"not": {}}``, a oneOf whose
        branches all have a twin, or objects only with a required property that allows no
        value."""
        w = self._writer_node(w)
        if w is False or _accepts_nothing(w):
            return True
        if type(w) is not dict or depth > 8:
            return False
        if isinstance(w.get("oneOf"), list) and _accepts_nothing(_without_twins(w)):
            return True
        required = w.get("required")
        if not isinstance(required, list) or w.get("type") != "object":
            return False
        properties = w.get("properties", {})
        return any(
            isinstance(name, str)
            and name in properties
            and _may_be_empty(properties[name])
            and self._writer_empty(properties[name], depth + 1)
            for name in required
        )

    # -- the writer side ----------------------------------------------------------------

    def _merge(self, schemas: Sequence[Any]) -> Any:
        """One schema allowing at least every document that all of ``schemas`` allow."""
        merged: dict[str, Any] = {}
        pending = list(schemas)
        while pending:
            node = self._writer_node(pending.pop(0))
            if node is False or _accepts_nothing(node):
                return False
            if node is True or not isinstance(node, Mapping):
                continue
            if "allOf" in node:
                pending = [
                    {k: v for k, v in node.items() if k != "allOf"},
                    *node["allOf"],
                    *pending,
                ]
                continue
            for key, value in node.items():
                if key in ANNOTATIONS:
                    continue
                if key not in merged:
                    merged[key] = value
                else:
                    combined = _combine(key, merged[key], value)
                    if combined is _DROP:
                        del merged[key]
                    else:
                        merged[key] = combined
        if "const" in merged:
            values = merged.pop("const")
            merged["enum"] = (
                [v for v in merged["enum"] if _canonical(v) == _canonical(values)]
                if "enum" in merged
                else [values]
            )
        return merged

    def _finite_values(self, w: Mapping[str, Any], excluded: Any = None) -> list[Any] | None:
        """The writer's whole value set, when it is finite and small enough to list (less what
        ``excluded``, the writer's own ``not``, rejects)."""
        candidates: list[Any] | None = None
        if "const" in w:
            candidates = [w["const"]]
        elif isinstance(w.get("enum"), list):
            candidates = list(w["enum"])
        else:
            types = _types(w)
            if types is not None and types <= {"boolean", "null"}:
                candidates = ([True, False] if "boolean" in types else []) + (
                    [None] if "null" in types else []
                )
            elif types == {"integer"} and self._integral_floats_are_integers:
                candidates = _small_range(w)
        if candidates is None:
            return None
        writer = self.writer_validator.evolve(
            schema=w if excluded is None else {**w, "not": excluded}
        )
        return [v for v in candidates if _is_valid(writer, v)]

    @functools.cached_property
    def _integral_floats_are_integers(self) -> bool:
        """From draft 6 on, 1.0 is an integer (and equals 1 in ``enum``): a writer's integers
        listed as ints then stand for their float spellings too."""
        return all(
            d not in _INTEGRAL_FLOATS_ARE_NUMBERS for d in (self.reader_draft, self.writer_draft)
        )

    def _check_values(self, r: Any, values: list[Any], path: str) -> list[Violation]:
        reader = self.reader_validator.evolve(schema=r)
        found = []
        allowed = None
        keyword = "enum"
        if isinstance(r, Mapping):
            if "const" in r:
                allowed, keyword = [r["const"]], "const"
            elif isinstance(r.get("enum"), list):
                allowed = r["enum"]
        for value in values:
            if _is_valid(reader, value):
                continue
            shown = _canonical(value)
            if allowed is not None and shown not in {_canonical(a) for a in allowed}:
                violation = Violation(
                    _pointer(path, keyword),
                    Rule.ENUM_VALUE_REMOVED,
                    f"the writer allows {shown}, which the reader's enum no longer lists",
                )
            else:
                violation = Violation(
                    path,
                    Rule.VALUE_REJECTED,
                    f"the writer allows {shown}, which the reader's schema rejects",
                )
            found.append(pending(violation, just(value)))
        return found

    # -- the reader side ----------------------------------------------------------------

    def _union(
        self, branches: list[Any], w: Mapping[str, Any], path: str, *, exclusive: bool
    ) -> list[Violation]:
        results = [self.compare(b, w, _pointer(path, i)) for i, b in enumerate(branches)]
        matches = [i for i, found in enumerate(results) if not found]
        union = {"oneOf" if exclusive else "anyOf": branches}
        if not matches:
            if len(branches) == 1:
                return results[0]
            closest = min(results, key=len)

            def candidates() -> Iterator[Any]:
                # What shows a branch's violation may be what no branch takes.
                for found in results:
                    for violation in found:
                        if isinstance(violation.example, Pending):
                            yield from itertools.islice(violation.example.candidates(), 2)
                yield from self.values.allowed(w, branches[0])

            return [
                pending(
                    Violation(
                        path,
                        Rule.UNION_UNMATCHED,
                        "no branch of the reader's union accepts everything the writer allows"
                        f" (closest: {closest[0].message} at {closest[0].path})",
                    ),
                    lambda: self._search(union, w, candidates()),
                )
            ]
        if exclusive:
            chosen = matches[0]
            for other, branch in enumerate(branches):
                if other != chosen and not self._disjoint(w, branch):
                    return [
                        self._example(
                            Violation(
                                path,
                                Rule.ONE_OF_AMBIGUOUS,
                                f"documents the writer allows may match both branch {chosen}"
                                f" and branch {other} of the reader's oneOf, which then rejects"
                                " them",
                            ),
                            union,
                            w,
                        )
                    ]
        return []

    def _disjoint(self, w: Any, other: Any) -> bool:
        """True when no document the writer allows can be valid under ``other`` (reader side)."""
        w = self._writer_node(w)
        other = self._reader_node(other)
        if w is False or other is False or _accepts_nothing(w):
            return True
        if not isinstance(w, Mapping) or not isinstance(other, Mapping):
            return False
        finite = self._finite_values(w)
        if finite is not None:
            check = self.reader_validator.evolve(schema=other)
            return not any(_is_valid(check, v) for v in finite)
        listed = [other["const"]] if "const" in other else other.get("enum")
        if isinstance(listed, list):
            # ``other`` allows at most these values: disjoint when the writer takes none.
            writer = self.writer_validator.evolve(schema=w)
            return not any(_may_be_valid(writer, v) for v in listed)
        wt, ot = _types(w), _types(other)
        if (
            wt is not None
            and ot is not None
            and not any(_accepts_type(ot, t) for t in wt)
            and not ("number" in wt and "integer" in ot)
        ):
            return True
        # Discriminated objects: a property both require, with values that cannot meet.
        both_required = set(w.get("required", [])) & set(other.get("required", []))
        w_props, o_props = w.get("properties", {}), other.get("properties", {})
        return any(
            name in w_props and name in o_props and self._disjoint(w_props[name], o_props[name])
            for name in sorted(both_required)
        )

    # -- keyword by keyword ------------------------------------------------------------

    def _keywords(self, r: dict[str, Any], w: dict[str, Any], path: str) -> list[Violation]:
        found: list[Violation] = []
        reader_types, writer_types = _types(r), _types(w)
        if reader_types is not None:
            missing = (
                None
                if writer_types is None
                else [t for t in sorted(writer_types) if not _accepts_type(reader_types, t)]
            )
            if missing is None or missing:
                message = (
                    f"the reader accepts only {_listing(reader_types)} but the writer allows"
                    " any type"
                    if missing is None
                    else f"the writer allows {_listing(missing)}, which the reader's type"
                    f" {_listing(reader_types)} rejects"
                )
                found.append(
                    self._example(
                        Violation(_pointer(path, "type"), Rule.TYPE_NARROWED, message),
                        {"type": r["type"]},
                        w,
                    )
                )
        produced = set(_ALL_TYPES if writer_types is None else writer_types)
        if "number" in produced:
            produced.add("integer")
        shared = {t for t in produced if _accepts_type(reader_types, t)}

        if "const" in r or "enum" in r:
            keyword = "enum" if "enum" in r else "const"
            found.append(
                self._example(
                    Violation(
                        _pointer(path, keyword),
                        Rule.ENUM_ADDED,
                        "the reader allows only a fixed set of values but the writer does not"
                        " limit them",
                    ),
                    {keyword: r[keyword]},
                    w,
                )
            )
        if shared & _NUMERIC:
            found += self._numbers(r, w, path)
        if "string" in shared:
            found += self._strings(r, w, path)
        if "array" in shared:
            found += self._arrays(r, w, path)
            if "contains" in r:
                found += self._contains(r, w, path)
        if "object" in shared:
            found += self._objects(r, w, path)
            if not _DEPENDENCIES.isdisjoint(r):
                found += self._dependencies(r, w, path)
            if "propertyNames" in r:
                found += self._property_names(r, w, path)
        for kind, bounds in _SIZE_BOUNDS.items():
            if kind in shared:
                for keyword, rule, is_lower in bounds:
                    found += [
                        self._example(v, {keyword: r[keyword]}, w)
                        for v in _size_bound(r, w, path, keyword, rule, is_lower)
                    ]

        for keyword, value in r.items():
            if (
                keyword in _HANDLED
                or keyword in ANNOTATIONS
                or keyword.startswith(("x-", "$unevaluated"))
            ):
                continue
            if keyword not in _known_keywords(self.reader_draft):
                continue  # validators ignore a keyword their draft does not have
            if keyword in _CONTEXTUAL:
                message = (
                    f"the reader's {keyword!r} resolves in the document's dynamic scope, so this"
                    " engine accepts it only where the reader and writer are identical"
                )
            elif self._same(value, w.get(keyword), annotations_matter=True):
                continue
            else:
                message = (
                    f"the reader's {keyword!r} differs from the writer's; this engine only"
                    " accepts it unchanged"
                )
            found.append(
                self._example(
                    Violation(_pointer(path, keyword), Rule.CONSTRAINT_CHANGED, message), r, w
                )
            )
        return found

    def _numbers(self, r: Mapping[str, Any], w: Mapping[str, Any], path: str) -> list[Violation]:
        found = []
        r_low, w_low = _lower(r), _lower(w)
        if r_low is not None and (
            w_low is None
            or w_low[0] < r_low[0]
            or (w_low[0] == r_low[0] and r_low[1] and not w_low[1])
        ):
            found.append(
                Violation(
                    _pointer(path, r_low[2]),
                    Rule.MINIMUM_TIGHTENED,
                    f"the reader requires values {'>' if r_low[1] else '>='} {r_low[0]} but the"
                    f" writer allows {_bound_text(w_low, 'lower')}",
                )
            )
        r_up, w_up = _upper(r), _upper(w)
        if r_up is not None and (
            w_up is None or w_up[0] > r_up[0] or (w_up[0] == r_up[0] and r_up[1] and not w_up[1])
        ):
            found.append(
                Violation(
                    _pointer(path, r_up[2]),
                    Rule.MAXIMUM_TIGHTENED,
                    f"the reader requires values {'<' if r_up[1] else '<='} {r_up[0]} but the"
                    f" writer allows {_bound_text(w_up, 'upper')}",
                )
            )
        if "multipleOf" in r and not _divides(r["multipleOf"], w.get("multipleOf"), _types(w)):
            found.append(
                Violation(
                    _pointer(path, "multipleOf"),
                    Rule.MULTIPLE_OF_CHANGED,
                    f"the reader requires multiples of {r['multipleOf']}, which the writer's"
                    f" values (multipleOf {w.get('multipleOf', 'unset')}) need not be",
                )
            )
        numeric = {k: v for k, v in r.items() if k in _NUMBER_KEYWORDS}
        return [self._example(v, numeric, w) for v in found]

    def _strings(self, r: Mapping[str, Any], w: Mapping[str, Any], path: str) -> list[Violation]:
        # Only the same pattern or format is known to hold for the writer's strings.
        found = []
        for keyword, rule in (("pattern", Rule.PATTERN_CHANGED), ("format", Rule.FORMAT_CHANGED)):
            if keyword in r and r[keyword] != w.get(keyword):
                has = f"{keyword} {w[keyword]!r}" if keyword in w else f"no {keyword}"
                detail = f"the reader requires {keyword} {r[keyword]!r} but the writer's strings"
                violation = Violation(_pointer(path, keyword), rule, f"{detail} have {has}")
                found.append(self._example(violation, {keyword: r[keyword]}, w))
        return found

    def _arrays(self, r: Mapping[str, Any], w: Mapping[str, Any], path: str) -> list[Violation]:
        found: list[Violation] = []
        reader_2020 = self.reader_prefix_items
        r_fixed, r_rest = _tuple_form(r, prefix_items=reader_2020)
        w_fixed, w_rest = _tuple_form(w, prefix_items=self.writer_prefix_items)
        tuple_key = "prefixItems" if reader_2020 else "items"
        rest_key = "items" if reader_2020 or not r_fixed else "additionalItems"
        if r.get(ITEMS_MARK):
            rest_key = "unevaluatedItems"
        for index in range(max(len(r_fixed), len(w_fixed))):
            reader_item = r_fixed[index] if index < len(r_fixed) else r_rest
            writer_item = w_fixed[index] if index < len(w_fixed) else w_rest
            where = (
                _pointer(path, tuple_key, index)
                if index < len(r_fixed)
                else _pointer(path, rest_key)
            )
            if (
                self._reader_node(reader_item) is False
                and self._writer_node(writer_item) is not False
            ):
                found.append(
                    self._items_rejected(
                        w,
                        index,
                        Violation(
                            where,
                            Rule.ADDITIONAL_ITEMS_REJECTED,
                            f"the writer allows an item at position {index} that the reader"
                            f" rejects{_cautious(r, ITEMS_MARK)}",
                        ),
                    )
                )
            else:
                found += placed(
                    self.compare(reader_item, writer_item, where), self._in_array(w, index)
                )
        after = max(len(r_fixed), len(w_fixed))
        if self._reader_node(r_rest) is False and self._writer_node(w_rest) is not False:
            found.append(
                self._items_rejected(
                    w,
                    after,
                    Violation(
                        _pointer(path, rest_key),
                        Rule.ADDITIONAL_ITEMS_REJECTED,
                        f"the writer allows more than {len(w_fixed)} items but the reader"
                        f" rejects items after position {len(r_fixed) - 1}"
                        f"{_cautious(r, ITEMS_MARK)}",
                    ),
                )
            )
        else:
            found += placed(
                self.compare(r_rest, w_rest, _pointer(path, rest_key)), self._in_array(w, after)
            )
        if r.get("uniqueItems") is True and w.get("uniqueItems") is not True:
            found.append(
                self._example(
                    Violation(
                        _pointer(path, "uniqueItems"),
                        Rule.UNIQUE_ITEMS_ADDED,
                        "the reader requires unique items but the writer allows duplicates",
                    ),
                    {"uniqueItems": True},
                    w,
                )
            )
        return found

    def _items_rejected(self, w: Mapping[str, Any], index: int, violation: Violation) -> Violation:
        """``violation`` shown by the writer's smallest array with an item at ``index``."""

        def candidates() -> Iterator[Any]:
            low = w.get("minItems", 0) if isinstance(w.get("minItems"), int) else 0
            items = self.values.items(w, max(index + 1, low), 0)
            if items is not None:
                yield items

        return pending(violation, candidates)

    def _contains(self, r: Mapping[str, Any], w: Mapping[str, Any], path: str) -> list[Violation]:
        """``contains`` with ``minContains`` / ``maxContains``: the writer's arrays must hold
        as many (as few) items the reader's ``contains`` accepts."""
        if "contains" not in r:
            return []
        wanted = r["contains"]
        least = r.get("minContains", 1)
        most = r.get("maxContains")
        found = []
        if isinstance(least, int) and least > 0 and not self._always_contains(wanted, least, w):
            found.append(
                Violation(
                    _pointer(path, "contains"),
                    Rule.CONTAINS_CHANGED,
                    f"the reader requires at least {least} item(s) its 'contains' accepts,"
                    " which the writer's arrays need not have",
                )
            )
        if isinstance(most, int) and not self._never_contains_more(wanted, most, w):
            found.append(
                Violation(
                    _pointer(path, "maxContains"),
                    Rule.CONTAINS_CHANGED,
                    f"the reader allows at most {most} item(s) its 'contains' accepts, and the"
                    " writer's arrays may have more",
                )
            )
        keywords = {k: r[k] for k in ("contains", "minContains", "maxContains") if k in r}
        return [self._example(v, keywords, w) for v in found]

    def _always_contains(self, wanted: Any, least: int, w: Mapping[str, Any]) -> bool:
        """Every writer array holds at least ``least`` items ``wanted`` accepts."""
        if (
            "contains" in w
            and w.get("minContains", 1) >= least
            and not self.compare(wanted, w["contains"], "#")
        ):
            return True
        w_fixed, w_rest = _tuple_form(w, prefix_items=self.writer_prefix_items)
        low = w.get("minItems", 0)
        # Every item is one ``wanted`` accepts, and there are enough of them.
        return (
            isinstance(low, int)
            and low >= least
            and all(not self.compare(wanted, item, "#") for item in [*w_fixed, w_rest])
        )

    def _never_contains_more(self, wanted: Any, most: int, w: Mapping[str, Any]) -> bool:
        """No writer array holds more than ``most`` items ``wanted`` accepts."""
        high = w.get("maxItems")
        if isinstance(high, int) and high <= most:
            return True
        if "contains" in w and self._same(w["contains"], wanted):
            return isinstance(w.get("maxContains"), int) and w["maxContains"] <= most
        w_fixed, w_rest = _tuple_form(w, prefix_items=self.writer_prefix_items)
        return all(self._disjoint(item, wanted) for item in [*w_fixed, w_rest])

    def _dependencies(
        self, r: Mapping[str, Any], w: Mapping[str, Any], path: str
    ) -> list[Violation]:
        """``dependentRequired`` / ``dependentSchemas`` / ``dependencies``: what the reader
        requires of an object with a given property, the writer's objects with it must have."""
        found: list[Violation] = []
        for keyword in ("dependencies", "dependentRequired", "dependentSchemas"):
            dependencies = r.get(keyword)
            if not isinstance(dependencies, Mapping):
                continue
            for name, needs in dependencies.items():
                if self._writer_node(self.values.property_schema(w, name)) is False:
                    continue  # the writer never has the property
                where = _pointer(path, keyword, name)
                with_name = self._merge([w, {"type": "object", "required": [name]}])
                if isinstance(needs, list):
                    missing = [n for n in needs if not self._requires_with(w, name, n)]
                    if missing:
                        violation = Violation(
                            where,
                            Rule.DEPENDENCY_ADDED,
                            f"the reader requires {', '.join(map(repr, missing))} wherever"
                            f" {name!r} is present, which the writer's objects need not have",
                        )
                        found.append(self._example(violation, {keyword: {name: needs}}, with_name))
                    continue
                own = self._dependent_schema(w, name)
                writer = self._merge([with_name, own]) if own is not None else with_name
                found += self.compare(needs, writer, where)
        return found

    def _requires_with(self, w: Mapping[str, Any], name: str, needed: str) -> bool:
        """Every writer object with ``name`` has ``needed`` too."""
        required = w.get("required", [])
        if needed == name or (isinstance(required, list) and needed in required):
            return True
        for keyword in ("dependencies", "dependentRequired"):
            listed = w.get(keyword, {})
            if (
                isinstance(listed, Mapping)
                and isinstance(listed.get(name), list)
                and needed in listed[name]
            ):
                return True
        return False

    def _dependent_schema(self, w: Mapping[str, Any], name: str) -> Any:
        """The schema the writer applies to its objects with ``name``, if any."""
        for keyword in ("dependencies", "dependentSchemas"):
            listed = w.get(keyword, {})
            if isinstance(listed, Mapping) and isinstance(listed.get(name), Mapping | bool):
                return listed[name]
        return None

    def _property_names(
        self, r: Mapping[str, Any], w: Mapping[str, Any], path: str
    ) -> list[Violation]:
        """``propertyNames``: every name the writer allows must be one the reader's takes."""
        wanted = r.get("propertyNames")
        if wanted is None or _is_trivial(self._reader_node(wanted)):
            return []
        where = _pointer(path, "propertyNames")
        names = self._merge([{"type": "string"}, w.get("propertyNames", True)])
        if names is False:
            return []
        found: list[Violation] = []
        w_props = w.get("properties", {})
        w_patterns = w.get("patternProperties", {})
        for name in w_props:
            if self._writer_node(w_props[name]) is False or not self._writer_accepts(names, name):
                continue
            if self._reader_rejects(wanted, name):
                violation = Violation(
                    where,
                    Rule.PROPERTY_NAME_REJECTED,
                    f"the writer allows property {name!r}, whose name the reader's"
                    " propertyNames rejects",
                )
                found.append(pending(violation, just(name)))
        sources = [self._merge([names, {"pattern": p}]) for p, s in w_patterns.items()
                   if self._writer_node(s) is not False]  # fmt: skip
        if self._writer_node(w.get("additionalProperties", True)) is not False:
            sources.append(names)
        for source in sources:
            found += [
                v.relabelled(f"{v.message}, for the names of the writer's properties")
                for v in self.compare(wanted, source, where)
            ]

        def named(name: Any) -> Any:
            if not isinstance(name, str):
                return NOTHING
            value = self.values.minimal(self.values.property_schema(w, name), 1)
            return NOTHING if value is NOTHING else self._in_object(w, name)(value)

        return placed(found, named)

    def _objects(self, r: Mapping[str, Any], w: Mapping[str, Any], path: str) -> list[Violation]:
        found: list[Violation] = []
        r_props: Mapping[str, Any] = r.get("properties", {})
        w_props: Mapping[str, Any] = w.get("properties", {})
        r_patterns: Mapping[str, Any] = r.get("patternProperties", {})
        w_patterns: Mapping[str, Any] = w.get("patternProperties", {})
        r_extra = r.get("additionalProperties", True)
        w_extra = w.get("additionalProperties", True)
        extra_key = "unevaluatedProperties" if r.get(PROPERTIES_MARK) else "additionalProperties"
        cautious = _cautious(r, PROPERTIES_MARK)

        # Declared names: the writer's schema for each against every reader schema for it.
        for name in list(r_props) + [n for n in w_props if n not in r_props]:
            reader_patterns = (
                [(p, s) for p, s in r_patterns.items() if _matches(p, name)] if r_patterns else []
            )
            if name in w_props:
                writer_schema = w_props[name]
                if (
                    name in r_props
                    and not reader_patterns
                    and self._unchanged(r_props[name], writer_schema)
                ):
                    continue
            elif w_patterns:
                matching = [s for p, s in w_patterns.items() if _matches(p, name)]
                writer_schema = self._merge(matching) if matching else w_extra
            else:
                writer_schema = w_extra
            if self._writer_node(writer_schema) is False:
                continue
            at = self._in_object(w, name)
            for pattern, schema in reader_patterns:
                found += placed(
                    self.compare(
                        schema, writer_schema, _pointer(path, "patternProperties", pattern)
                    ),
                    at,
                )
            if name in r_props:
                if name not in w_props and _is_trivial(self._writer_node(writer_schema)):
                    if not _is_trivial(self._reader_node(r_props[name])):
                        violation = Violation(
                            _pointer(path, "properties", name),
                            Rule.PROPERTY_CONSTRAINED,
                            f"the writer does not declare {name!r} and its open content model"
                            " allows any value there, which the reader constrains",
                        )
                        found += placed(
                            [self._example(violation, r_props[name], writer_schema)], at
                        )
                    continue
                found += placed(
                    self.compare(r_props[name], writer_schema, _pointer(path, "properties", name)),
                    at,
                )
            elif reader_patterns:
                continue
            elif self._reader_node(r_extra) is False:
                found.append(
                    self._with_property(
                        w,
                        name,
                        writer_schema,
                        Violation(
                            _pointer(path, "properties", name),
                            Rule.PROPERTY_REJECTED,
                            f"the writer allows property {name!r}, which the reader's closed"
                            f" content model ({extra_key}: false) rejects{cautious}",
                        ),
                    )
                )
            else:
                found += placed(self.compare(r_extra, writer_schema, _pointer(path, extra_key)), at)

        # Undeclared names: the writer's patterns and additionalProperties, each compared with
        # the reader's schemas only for names that can fall under both.
        declared = (r_props, w_props)
        writer_sources: list[tuple[str | None, Any]] = list(w_patterns.items())
        writer_sources.append((None, w_extra))
        for w_pattern, writer_schema in writer_sources:
            if self._writer_node(writer_schema) is False:
                continue
            # The names of this source: matching w_pattern, or (additional) no writer pattern.
            must = [w_pattern] if w_pattern is not None else []
            must_not = [] if w_pattern is not None else list(w_patterns)
            for r_pattern, reader_schema in r_patterns.items():
                if w_pattern is None:
                    if any(_includes(p, r_pattern) for p in w_patterns):
                        continue  # its names all fall under a writer pattern
                elif not _may_overlap(w_pattern, r_pattern):
                    continue
                at = self._undeclared(w, [*must, r_pattern], must_not, declared)
                found += placed(
                    self.compare(
                        reader_schema, writer_schema, _pointer(path, "patternProperties", r_pattern)
                    ),
                    at,
                )
            if w_pattern is not None and any(_includes(p, w_pattern) for p in r_patterns):
                continue  # every name of this source falls under a reader pattern
            at = self._undeclared(w, must, must_not + list(r_patterns), declared)
            if self._reader_node(r_extra) is False:
                allowed = (
                    f"property names matching {w_pattern!r}"
                    if w_pattern is not None
                    else "undeclared properties"
                )
                violation = Violation(
                    _pointer(path, extra_key),
                    Rule.ADDITIONAL_PROPERTIES_CLOSED,
                    f"the writer allows {allowed}, which the reader's closed content model"
                    f" rejects{cautious}",
                )
                found.append(self._placed_value(violation, at, writer_schema))
            else:
                found += placed(self.compare(r_extra, writer_schema, _pointer(path, extra_key)), at)

        w_required = set(w.get("required", []) if isinstance(w.get("required"), list) else [])
        r_required = r.get("required", []) if isinstance(r.get("required"), list) else []
        for name in r_required:
            if name not in w_required:
                violation = Violation(
                    _pointer(path, "required"),
                    Rule.REQUIRED_ADDED,
                    f"the reader requires {name!r}, which the writer may omit",
                )
                found.append(self._example(violation, {"required": [name]}, w))
        return found

    def _placed_value(
        self, violation: Violation, at: Callable[[Any], Any], schema: Any
    ) -> Violation:
        """``violation`` shown by the smallest value of ``schema``, placed by ``at``."""
        return pending(violation, lambda: _one(at(self.values.minimal(schema, 1))))

    def _with_property(
        self, w: Mapping[str, Any], name: str, schema: Any, violation: Violation
    ) -> Violation:
        """``violation`` shown by the writer's smallest object with property ``name``."""
        return pending(
            violation, lambda: _one(self._in_object(w, name)(self.values.minimal(schema, 1)))
        )

    def _undeclared(
        self,
        w: Mapping[str, Any],
        must: list[str],
        must_not: list[str],
        declared: tuple[Mapping[str, Any], Mapping[str, Any]],
    ) -> Callable[[Any], Any]:
        """Places a value under an undeclared property name that matches every pattern of
        ``must`` and none of ``must_not`` (NOTHING where no such name comes to mind)."""

        def build(value: Any) -> Any:
            if value is NOTHING:
                return NOTHING
            taken = {*declared[0], *declared[1]}
            pool = names_for(must[0]) if must else iter([fresh_name(taken, must_not)])
            for name in pool:
                if (
                    name not in taken
                    and all(search(p, name) for p in must)
                    and not any(search(p, name) for p in must_not)
                ):
                    return self._in_object(w, name)(value)
            return NOTHING

        return build


_DROP = object()


def _combine(key: str, first: Any, second: Any) -> Any:
    """Both values of ``key`` from allOf branches; _DROP when only dropping stays safe."""
    if _canonical(first) == _canonical(second):
        return first
    if key == "type":
        a = {first} if isinstance(first, str) else set(first)
        b = {second} if isinstance(second, str) else set(second)
        both = (
            (a & b)
            | ({"integer"} if ("integer" in a and "number" in b) else set())
            | ({"integer"} if ("number" in a and "integer" in b) else set())
        )
        return sorted(both)
    if key == "required":
        return list(dict.fromkeys([*first, *second]))
    if key == "enum":
        kept = {_canonical(v) for v in second}
        return [v for v in first if _canonical(v) in kept]
    if key in ("properties", "patternProperties"):
        out = dict(first)
        for name, schema in second.items():
            out[name] = {"allOf": [out[name], schema]} if name in out else schema
        return out
    if key in ("minLength", "minItems", "minProperties"):
        return max(first, second)
    if key in ("maxLength", "maxItems", "maxProperties"):
        return min(first, second)
    numeric = (int, float)
    if key in ("minimum", "exclusiveMinimum") and all(
        isinstance(v, numeric) and not isinstance(v, bool) for v in (first, second)
    ):
        return max(first, second)
    if key in ("maximum", "exclusiveMaximum") and all(
        isinstance(v, numeric) and not isinstance(v, bool) for v in (first, second)
    ):
        return min(first, second)
    if key == "items" and isinstance(first, Mapping | bool) and isinstance(second, Mapping | bool):
        return {"allOf": [first, second]}
    return _DROP


def _small_range(w: Mapping[str, Any]) -> list[int] | None:
    """The integers between the writer's bounds, when both are set and few lie between."""
    low, high = _lower(w), _upper(w)
    if low is None or high is None:
        return None
    first, last = math.floor(low[0]), math.ceil(high[0])
    return list(range(first, last + 1)) if last - first <= 32 else None


def _for_value(node: Any, value: Any) -> Any:
    """``node`` as it validates ``value``: an object's declared properties it does not have
    change nothing (``properties`` looks only at the names present), and a schema with many
    of them validates several times faster without them."""
    if type(value) is not dict or type(node) is not dict:
        return node
    declared = node.get("properties")
    if type(declared) is not dict or len(declared) <= len(value):
        return node
    return {**node, "properties": {k: declared[k] for k in value if k in declared}}


def _has_fraction(value: Any) -> bool:
    if type(value) is float:
        return not value.is_integer()
    if type(value) is list:
        return any(map(_has_fraction, value))
    if type(value) is dict:
        return any(map(_has_fraction, value.values()))
    return False


def _one(value: Any) -> list[Any]:
    return [] if value is NOTHING else [value]


def _cautious(r: Mapping[str, Any], mark: str) -> str:
    """What a violation found through a cautious spelling of ``unevaluated*`` adds."""
    if r.get(mark) != "cautious":
        return ""
    keyword = mark.lstrip("$")
    return (
        f" (cautious: the reader's {keyword} also passes what its anyOf/oneOf/if branches"
        " evaluate, which this engine does not follow)"
    )


def _literal_prefix(pattern: str) -> str | None:
    """``lit`` for a pattern ``^lit...`` without alternatives: every name it matches starts
    with ``lit``."""
    if not pattern.startswith("^") or "|" in pattern:
        return None
    literal = re.match(r"\^([A-Za-z0-9_\- ]*)", pattern)
    text = literal.group(1) if literal else ""
    rest = pattern[1 + len(text) :]
    if rest[:1] in ("*", "?", "{") and text:
        text = text[:-1]  # a quantified last letter may be absent
    return text


def _includes(outer: str, inner: str) -> bool:
    """Every name ``inner`` matches, ``outer`` matches too (known in the common cases: the
    same pattern, or ``^prefix`` of a pattern with a longer prefix)."""
    if outer == inner:
        return True
    prefix, inner_prefix = _literal_prefix(outer), _literal_prefix(inner)
    return (
        prefix is not None
        and outer == "^" + prefix
        and inner_prefix is not None
        and inner_prefix.startswith(prefix)
    )


def _may_overlap(first: str, second: str) -> bool:
    """Some name may match both patterns (False only where none can: literal prefixes that
    part ways, ``^S_`` and ``^x-``)."""
    a, b = _literal_prefix(first), _literal_prefix(second)
    return a is None or b is None or a.startswith(b) or b.startswith(a)


def _is_valid(validator: ValidatorProtocol, value: Any) -> bool:
    try:
        return bool(validator.is_valid(value))
    except (UnknownType, Unresolvable, TypeError, re.error):
        return False  # a schema the validator cannot apply proves nothing: not accepted


def _may_be_valid(validator: ValidatorProtocol, value: Any) -> bool:
    """As ``_is_valid``, but a schema the validator cannot apply may accept anything."""
    try:
        return bool(validator.is_valid(value))
    except (UnknownType, Unresolvable, TypeError, re.error):
        return True


def _matches(pattern: str, name: str) -> bool:
    try:
        return re.search(pattern, name) is not None
    except re.error:
        return True  # an unreadable pattern may match anything


def _divides(reader: Any, writer: Any, writer_types: frozenset[str] | None) -> bool:
    """Is every multiple of ``writer`` (or every integer) a multiple of ``reader``?"""
    try:
        r = Decimal(str(reader))
        if writer is None:
            return writer_types is not None and writer_types == {"integer"} and r == 1
        divides = r != 0 and (Decimal(str(writer)) / r) % 1 == 0
        if r % 1 != 0 and divides:
            # Validators test fractional multiples in binary floating point (0.6 / 0.1 is
            # 5.999...): exact only for a power of two (0.5, 0.25); else only the writer's
            # very own step is sure to pass.
            inverse = 1 / r
            power_of_two = inverse % 1 == 0 and int(inverse) & (int(inverse) - 1) == 0
            return power_of_two or Decimal(str(writer)) == r
        return divides
    except (InvalidOperation, ArithmeticError):
        return False


def _size_bound(
    r: Mapping[str, Any],
    w: Mapping[str, Any],
    path: str,
    keyword: str,
    rule: Rule,
    is_lower: bool,
) -> list[Violation]:
    if keyword not in r:
        return []
    reader_bound, writer_bound = r[keyword], w.get(keyword)
    if is_lower:
        ok = reader_bound <= (writer_bound or 0)
    else:
        ok = writer_bound is not None and writer_bound <= reader_bound
    if ok:
        return []
    return [
        Violation(
            _pointer(path, keyword),
            rule,
            f"the reader's {keyword} is {reader_bound} but the writer's is"
            f" {'unset' if writer_bound is None else writer_bound}",
        )
    ]


def _bound_text(bound: tuple[Any, bool, str] | None, side: str) -> str:
    if bound is None:
        return f"values without a {side} bound"
    sign = (">" if bound[1] else ">=") if side == "lower" else ("<" if bound[1] else "<=")
    return f"values {sign} {bound[0]}"


def _listing(types: Any) -> str:
    return "/".join(sorted(types))
