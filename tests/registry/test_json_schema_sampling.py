"""The JSON Schema engine's verdicts, checked with documents generated from the writer schema.

There is no reference implementation to compare with, so the promise is tested directly on
a seeded corpus (hand-written corners, the compatibility matrix, generated edits): where the
engine says the reader takes what the writer allows, no generated writer document may be
rejected by the reader (a rejected one is an unsound verdict, and fails the test); where it
says it does not, a document the reader rejects is searched for. The rates of verdicts the
samples bear out are printed (run with -s), and the witness rate may not fall below a floor.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from changebroker.registry.compat import json_schema_violations
from changebroker.registry.compat.json_schema import validator_class
from tests.registry.json_corpus import Pair, corpus
from tests.registry.json_documents import documents, property_names

SAMPLES = 40  # documents per writer schema
WITNESS_FLOOR = 0.8  # of incompatible verdicts, those a document shows
MOVED_SAMPLES = 300  # documents per writer schema where a verdict moved to compatible

# Verdicts that moved from incompatible to compatible when the engine learnt to read
# patternProperties by the names they can match, a ``not`` by inclusion, writers that allow
# nothing (``{"not": {}}``, a oneOf of twin branches), dependencies, contains,
# propertyNames, unevaluated*, whole-number multiples and small integer ranges. Each is held
# to many more samples than the rest; a writer that allows nothing must reject every value.
MOVED_TO_COMPATIBLE = [
    "number read as integer",
    "enum replaced by a covering range (old reads new)",
    "unevaluatedProperties kept while a property is added (new reads old)",
    "generated 4: move_bound (old reads new)",
    "generated 31: change_type, add_not (old reads new)",
    "generated 43: add_not (new reads old)",
    "generated 44: toggle_required, toggle_closed (old reads new)",
    "generated 51: move_bound (new reads old)",
    "generated 56: move_bound (new reads old)",
    "generated 71: change_items (old reads new)",
    "generated 122: add_not (new reads old)",
    "generated 122: add_not (old reads new)",
    "generated 126: edit_enum, add_not (old reads new)",
    "generated 132: add_not (new reads old)",
    "generated 163: move_bound, wrap_union (new reads old)",
    "generated 163: move_bound, wrap_union (old reads new)",
    "generated 173: add_not (new reads old)",
    "generated 173: add_not (old reads new)",
]
ANY_VALUES: list[Any] = [None, True, 0, 7, 1.5, "", "a", [], [None], {}, {"tags": None}]


@dataclass(frozen=True)
class Outcome:
    pair: Pair
    compatible: bool
    sampled: int  # writer documents generated
    rejected: list[Any]  # of those, the ones the reader rejects


def _remote(pair: Pair) -> bool:
    """A reference to another host cannot be followed offline: nothing to sample."""
    return '"$ref": "http' in json.dumps([pair.reader, pair.writer])


PAIRS = [p for p in corpus() if not _remote(p)]


@pytest.fixture(scope="module")
def outcomes() -> list[Outcome]:
    found = []
    for index, pair in enumerate(PAIRS):
        compatible = not json_schema_violations(pair.reader, pair.writer)
        names = property_names(pair.reader, pair.writer)
        docs = documents(pair.writer, count=SAMPLES, seed=index, names=names)
        reader = validator_class(pair.reader)(pair.reader)
        rejected = [d for d in docs if not reader.is_valid(d)]
        found.append(Outcome(pair, compatible, len(docs), rejected))
    return found


def test_corpus_is_big_enough() -> None:
    assert len(PAIRS) >= 500
    assert len({p.name for p in PAIRS}) == len(PAIRS)


def test_compatible_verdicts_hold_for_every_sample(outcomes: list[Outcome]) -> None:
    unsound = [
        f"{o.pair.name}: the reader rejects {json.dumps(o.rejected[0])}"
        for o in outcomes
        if o.compatible and o.rejected
    ]
    assert not unsound, "\n".join(unsound)


def test_incompatible_verdicts_are_mostly_shown(outcomes: list[Outcome]) -> None:
    compatible = [o for o in outcomes if o.compatible]
    incompatible = [o for o in outcomes if not o.compatible]
    sampled = sum(o.sampled > 0 for o in compatible)
    shown = sum(bool(o.rejected) for o in incompatible)
    print(
        f"\nJSON Schema sampling over {len(outcomes)} pairs, {SAMPLES} writer documents each:"
        f"\n  compatible {len(compatible)}: every sample read in all;"
        f" {sampled} had samples ({sampled / len(compatible):.1%})"
        f"\n  incompatible {len(incompatible)}: a witness document found for {shown}"
        f" ({shown / len(incompatible):.1%}); the rest are unshown (e.g. format, or a"
        " conservative answer on oneOf / not)"
        f"\n  verdicts shown either way: {(sampled + shown) / len(outcomes):.1%}"
    )
    assert shown / len(incompatible) >= WITNESS_FLOOR
    for outcome in incompatible:
        writer = validator_class(outcome.pair.writer)(outcome.pair.writer)
        assert all(writer.is_valid(d) for d in outcome.rejected), outcome.pair.name


@pytest.mark.parametrize("name", MOVED_TO_COMPATIBLE)
def test_verdicts_moved_to_compatible_hold_for_many_samples(name: str) -> None:
    index, pair = next((i, p) for i, p in enumerate(PAIRS) if p.name == name)
    assert not json_schema_violations(pair.reader, pair.writer)
    names = property_names(pair.reader, pair.writer)
    docs = documents(pair.writer, count=MOVED_SAMPLES, seed=index, names=names)
    writer = validator_class(pair.writer)(pair.writer)
    if not docs:  # the writer allows nothing at all
        assert not any(writer.is_valid(value) for value in ANY_VALUES), name
        return
    reader = validator_class(pair.reader)(pair.reader)
    rejected = [d for d in docs if not reader.is_valid(d)]
    assert not rejected, f"{name}: the reader rejects {json.dumps(rejected[0])}"
