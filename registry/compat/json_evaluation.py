"""``unevaluatedProperties`` / ``unevaluatedItems`` spelt with the keywords the comparison reads.

Such a keyword applies to the properties (items) that no keyword beside it evaluated, nor any
subschema applied in place that the document passed. Where those subschemas are ``allOf``
branches and ``$ref`` targets (always applied to a valid document), the evaluated names are
known: ``unevaluatedProperties: U`` is then ``additionalProperties: U`` with the branches'
properties and patterns declared beside it (as ``{}``, their own constraints stay in the
branches), and ``unevaluatedItems: U`` is the rest of the array after the longest prefix.

Where ``anyOf``/``oneOf``/``if``/``dependentSchemas``/``contains`` or a dynamic reference
may evaluate more, depending on the document, the spelling is stricter than the keyword: a
reader spelt so may refuse what the real one takes (safe: the answer is only cautious, and
says so), and a writer's keyword is dropped instead (it then allows more, which is safe).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# Set on a node the comparison spelt this way: "exact", or "cautious" where the reader's
# spelling is stricter than the keyword. The comparison names the keyword from it.
PROPERTIES_MARK = "$unevaluatedProperties"
ITEMS_MARK = "$unevaluatedItems"

# In-place applicators whose evaluations depend on which branch the document passes.
_DYNAMIC = ("anyOf", "oneOf", "if", "dependentSchemas", "$dynamicRef", "$recursiveRef")


class Evaluation:
    def __init__(self, resolve: Callable[[Any], Any], prefix_items: bool) -> None:
        self.resolve = resolve  # one side's $ref resolution
        self.prefix_items = prefix_items  # draft 2020-12: prefixItems + items

    def _always(self, node: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], bool]:
        """The subschemas applied in place wherever ``node`` holds: its allOf branches and
        $ref targets, and theirs (``node`` itself not included); and whether all of them are
        known (a reference that does not resolve may evaluate anything)."""
        found: list[Mapping[str, Any]] = []
        known = True
        pending = [*_branches(node)]
        seen: set[int] = set()
        while pending:
            branch = self.resolve(pending.pop())
            if branch is True or (isinstance(branch, Mapping) and "$ref" in branch):
                known = False
            if not isinstance(branch, Mapping) or id(branch) in seen:
                continue
            seen.add(id(branch))
            found.append(branch)
            pending += [b for b in _branches(branch) if b is not branch]
        return found, known

    def model(self, node: Mapping[str, Any], *, reader: bool) -> dict[str, Any]:
        always, known = self._always(node)
        exact = known and not any(k in s for s in [node, *always] for k in _DYNAMIC)
        out = dict(node)
        if "unevaluatedProperties" in out:
            rest = out.pop("unevaluatedProperties")
            if rest is not True and (exact or reader):
                self._properties(out, always, rest, "exact" if exact else "cautious")
        if "unevaluatedItems" in out:
            rest = out.pop("unevaluatedItems")
            exact_items = exact and not any("contains" in s for s in [node, *always])
            if rest is not True and (exact_items or reader):
                self._items(out, always, rest, "exact" if exact_items else "cautious")
        return out

    def _properties(
        self, out: dict[str, Any], always: list[Mapping[str, Any]], rest: Any, mark: str
    ) -> None:
        if "additionalProperties" in out or any(
            "additionalProperties" in s or "unevaluatedProperties" in s for s in always
        ):
            return  # every property is evaluated already: the keyword constrains nothing
        properties = dict(_mapping(out.get("properties")))
        patterns = dict(_mapping(out.get("patternProperties")))
        for branch in always:
            for name in _mapping(branch.get("properties")):
                properties.setdefault(name, {})
            for pattern in _mapping(branch.get("patternProperties")):
                patterns.setdefault(pattern, {})
        if properties:
            out["properties"] = properties
        if patterns:
            out["patternProperties"] = patterns
        out["additionalProperties"] = rest
        out[PROPERTIES_MARK] = mark

    def _items(
        self, out: dict[str, Any], always: list[Mapping[str, Any]], rest: Any, mark: str
    ) -> None:
        prefix_key = "prefixItems" if self.prefix_items else "items"
        every = [out, *always]
        if self.prefix_items:
            covered = any("items" in s or "unevaluatedItems" in s for s in every[1:])
            covered = covered or "items" in out
        else:
            covered = any(
                ("items" in s and not isinstance(s["items"], list))
                or "additionalItems" in s
                or "unevaluatedItems" in s
                for s in every
            )
        if covered:
            return  # every item is evaluated already
        length = max((len(s[prefix_key]) for s in every if isinstance(s.get(prefix_key), list)),
                     default=0)  # fmt: skip
        own = out.get(prefix_key)
        prefix = list(own) if isinstance(own, list) else []
        prefix += [{}] * (length - len(prefix))
        if self.prefix_items:
            if prefix:
                out["prefixItems"] = prefix
            out["items"] = rest
        elif prefix:
            out["items"] = prefix
            out["additionalItems"] = rest
        else:
            out["items"] = rest
        out[ITEMS_MARK] = mark


def _branches(node: Mapping[str, Any]) -> list[Any]:
    found = list(node["allOf"]) if isinstance(node.get("allOf"), list) else []
    if isinstance(node.get("$ref"), str):
        found.append({"$ref": node["$ref"]})  # the target alone, not the keywords beside it
    return found


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
