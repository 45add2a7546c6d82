"""A side-by-side diff of two schema versions, and the fields one adds or removes."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Row:
    """One line of the side-by-side view: ``kind`` is equal, added, removed or changed."""

    left: str
    right: str
    kind: str


def pretty(schema: Any) -> str:
    """A schema as stable, indented JSON lines (a JSON string is parsed first)."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            return schema
    return json.dumps(schema, indent=2, sort_keys=True)


def side_by_side(old: Any, new: Any) -> list[Row]:
    left, right = pretty(old).splitlines(), pretty(new).splitlines()
    rows: list[Row] = []
    matcher = difflib.SequenceMatcher(a=left, b=right, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            rows += [Row(a, b, "equal") for a, b in zip(left[i1:i2], right[j1:j2], strict=True)]
        elif op == "insert":
            rows += [Row("", b, "added") for b in right[j1:j2]]
        elif op == "delete":
            rows += [Row(a, "", "removed") for a in left[i1:i2]]
        else:
            a_lines, b_lines = left[i1:i2], right[j1:j2]
            for k in range(max(len(a_lines), len(b_lines))):
                a = a_lines[k] if k < len(a_lines) else ""
                b = b_lines[k] if k < len(b_lines) else ""
                rows.append(Row(a, b, "changed" if a and b else ("removed" if a else "added")))
    return rows


def fields(schema: Any, prefix: str = "") -> set[str]:
    """Every property path of a JSON schema (``address.city``); empty for other formats."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            return set()
    found: set[str] = set()
    if not isinstance(schema, dict):
        return found
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name, sub in properties.items():
            path = f"{prefix}{name}"
            found.add(path)
            found |= fields(sub, path + ".")
    items = schema.get("items")
    if isinstance(items, dict):
        found |= fields(items, prefix + "[].")
    return found


def field_changes(old: Any, new: Any) -> tuple[list[str], list[str]]:
    """(added, removed) property paths from ``old`` to ``new``."""
    before, after = fields(old), fields(new)
    return sorted(after - before), sorted(before - after)
