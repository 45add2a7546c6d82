"""The engine's vocabulary: modes, violations, Nakadi version levels; the pair walk both checkers
use against recursive types."""

from __future__ import annotations

import dataclasses
import enum
import itertools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from changebroker.registry.compat.rules import Rule


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
    # What shows the break: a document (JSON Schema) or a datum in Avro's JSON encoding that
    # the writer allows and the reader cannot take. ``proven`` says the example was checked
    # (``None`` is then the JSON document null); without it the engine is only cautious.
    example: Any = field(default=None, hash=False)
    proven: bool = False

    def relabelled(self, message: str) -> Violation:
        """The same violation, example and all, in other words."""
        return dataclasses.replace(self, message=message)


class Pending:
    """A violation's candidate examples while the walk is under way, built only when asked:
    a walk throws most of its violations away (a union's other branches), and a check with
    examples off never asks. ``json_schema_violations`` / ``avro_violations`` settle them."""

    __slots__ = ("candidates",)

    def __init__(self, candidates: Callable[[], Iterable[Any]]) -> None:
        self.candidates = candidates

    def map(self, build: Callable[[Any], Any]) -> Pending:
        """The candidates, each placed in the document around it by ``build`` (which returns
        ``NOTHING`` where it cannot)."""
        inner = self.candidates
        return Pending(lambda: (b for b in map(build, inner()) if b is not NOTHING))


class _Nothing:
    def __repr__(self) -> str:
        return "NOTHING"


NOTHING: Any = _Nothing()  # "no value": None is the JSON document null


def just(value: Any) -> Callable[[], Iterable[Any]]:
    """The candidates that are ``value`` alone."""
    return lambda: [value]


def pending(violation: Violation, candidates: Callable[[], Iterable[Any]]) -> Violation:
    """``violation`` with candidate examples, to be settled at the end of the walk."""
    return dataclasses.replace(violation, example=Pending(candidates))


def placed(violations: Sequence[Violation], build: Callable[[Any], Any]) -> list[Violation]:
    """``violations`` found inside a part of the document, their candidates placed in the whole
    by ``build``."""
    return [
        dataclasses.replace(v, example=v.example.map(build))
        if isinstance(v.example, Pending)
        else v
        for v in violations
    ]


def _distinct(candidates: Iterable[Any]) -> Iterator[Any]:
    seen: set[str] = set()
    for candidate in candidates:
        text = json.dumps(candidate, sort_keys=True)
        if text not in seen:
            seen.add(text)
            yield candidate


# Candidates tried for one violation: each costs a validation of the whole document.
TRIES = 6


# What one check's comparisons proved, by (path, rule, message): checked against a history,
# the same violation comes back for version after version, and its example most often holds
# for each of them.
Shown = dict[tuple[str, str, str], Any]


def settle(
    violations: Sequence[Violation],
    proves: Callable[[Any], bool] | None,
    shown: Shown | None = None,
) -> list[Violation]:
    """Each pending example replaced by the first candidate ``proves`` confirms (then proven),
    or by none; ``proves=None`` turns examples off (nothing is built). ``shown`` offers the
    examples earlier comparisons of the check proved for the same violation first."""
    settled = []
    for violation in violations:
        if not isinstance(violation.example, Pending):
            settled.append(violation)
            continue
        found = NOTHING
        key = (violation.path, str(violation.rule), violation.message)
        if proves is not None and shown is not None and key in shown and proves(shown[key]):
            found = shown[key]
        elif proves is not None:
            try:
                for candidate in itertools.islice(_distinct(violation.example.candidates()), TRIES):
                    if proves(candidate):
                        found = candidate
                        break
            except (RecursionError, ValueError, TypeError, re.error):
                found = NOTHING  # a schema too odd to build from: the verdict stands unshown
            if shown is not None and found is not NOTHING:
                shown[key] = found
        settled.append(
            dataclasses.replace(
                violation,
                example=None if found is NOTHING else found,
                proven=found is not NOTHING,
            )
        )
    return settled


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
