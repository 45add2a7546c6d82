"""The engine's vocabulary: modes, violations, Nakadi version levels; the pair walk both checkers
use against recursive types."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from registry.compat.rules import Rule


class Mode(enum.StrEnum):
    """OpenSchema compatibility settings (docs/specs/openschema-spec-cn.txt, chapter 2)."""

    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"
    NONE = "NONE"

    @property
    def transitive(self) -> bool:
        """Checked against every earlier schema, not just the latest."""
        return self.value.endswith("_TRANSITIVE")


@dataclass(frozen=True)
class Violation:
    """One reason a reader cannot read what a writer may produce."""

    path: str  # JSON-pointer style location in the schema, e.g. "#/properties/price/type"
    rule: Rule  # what was broken, from the table in rules.py (e.g. "type-narrowed")
    message: str  # one sentence a person understands


class PairWalk:
    """Compares each (reader, writer) pair of nodes once at a time: a recursive type coming
    back to a pair already under comparison adds nothing, since the enclosing comparison of
    that pair decides."""

    def __init__(self) -> None:
        self._active: set[tuple[int, int]] = set()

    def compare(
        self, reader: object, writer: object, compare: Callable[[], list[Violation]]
    ) -> list[Violation]:
        key = (id(reader), id(writer))
        if key in self._active:
            return []
        self._active.add(key)
        try:
            return compare()
        finally:
            self._active.discard(key)


class Level(enum.StrEnum):
    """Semantic-version level of a schema change; NONE means nothing changed."""

    NONE = "NONE"
    PATCH = "PATCH"
    MINOR = "MINOR"
    MAJOR = "MAJOR"


@dataclass(frozen=True)
class Evolution:
    """How big a Nakadi schema change is, and why it is rejected (if it is)."""

    level: Level
    violations: list[Violation] = field(default_factory=list)


class SchemaError(ValueError):
    """The schema itself is malformed (not a compatibility problem)."""
