"""The registry's Avro verdicts against Apache Avro's SchemaCompatibility on a seeded corpus.

Avro's Java code runs once per session (one JVM for every pair). Every pair must get the
same verdict for BACKWARD, FORWARD and FULL, and the same "invalid schema" answer, except
the deviations below, where the registry follows the specification and Avro's Java code
does not; each must still differ, so the list stays true.
"""

from __future__ import annotations

import json

import pytest

from tests.registry.avro_corpus import Pair, corpus
from tests.registry.avro_reference import (
    Example,
    Verdict,
    reference_verdicts,
    registry_examples,
    registry_verdicts,
)
from tests.registry.compat_cases import AVRO_CASES

EXPECTED_DEVIATIONS = {
    "reader union, first matching branch not compatible": (
        "the specification resolves a writer through the first reader-union branch that"
        " matches it (here x.R, by unqualified name) and fails when that branch cannot read"
        " it; Avro's Java checker accepts when any branch can"
    ),
    "non-ASCII record name": (
        "names are [A-Za-z_][A-Za-z0-9_]* by the specification; Avro's Java parser accepts"
        " any Unicode letter"
    ),
    "bytes default beyond code point 255": (
        "bytes defaults map code points 0-255 to byte values by the specification, so '€'"
        " is no byte string; Avro's Java parser takes any string"
    ),
    "fixed default of the wrong length": (
        "a fixed default is a string of the fixed's size in bytes; Avro's Java parser takes"
        " any string"
    ),
    "float NaN default": (
        "a float default is a JSON number by the specification's table of defaults; Avro's"
        " Java parser also takes the strings NaN and Infinity"
    ),
}

PAIRS = corpus()
MODES = ("backward", "forward", "full")


@pytest.fixture(scope="module")
def verdicts() -> list[tuple[Pair, Verdict, Verdict]]:
    """(pair, Avro's verdict, the registry's verdict) for every pair of the corpus."""
    return list(zip(PAIRS, reference_verdicts(PAIRS), registry_verdicts(PAIRS), strict=True))


def _agree(reference: Verdict, ours: Verdict, mode: str) -> bool:
    return reference.invalid == ours.invalid and getattr(reference, mode) == getattr(ours, mode)


def test_corpus_covers_the_shapes() -> None:
    assert len(PAIRS) >= 400
    assert len({p.name for p in PAIRS}) == len(PAIRS)
    assert set(EXPECTED_DEVIATIONS) <= {p.name for p in PAIRS}


@pytest.mark.parametrize("mode", MODES)
def test_registry_agrees_with_avro(
    verdicts: list[tuple[Pair, Verdict, Verdict]], mode: str
) -> None:
    differing = {pair.name for pair, ref, ours in verdicts if not _agree(ref, ours, mode)}
    both_valid = [(r, o) for _, r, o in verdicts if not any(r.invalid + o.invalid)]
    agreeing_valid = sum(getattr(r, mode) == getattr(o, mode) for r, o in both_valid)
    print(
        f"\n{mode.upper()}: the registry agrees with Avro 1.12 on"
        f" {len(verdicts) - len(differing)}/{len(verdicts)} pairs,"
        f" {agreeing_valid}/{len(both_valid)} where both take the schemas"
    )
    unexpected = sorted(differing - set(EXPECTED_DEVIATIONS))
    details = [
        f"{pair.name}: Avro {ref}, registry {ours}"
        for pair, ref, ours in verdicts
        if pair.name in unexpected
    ]
    assert not unexpected, "\n".join(details)


def test_every_expected_deviation_still_differs(
    verdicts: list[tuple[Pair, Verdict, Verdict]],
) -> None:
    for pair, ref, ours in verdicts:
        if pair.name in EXPECTED_DEVIATIONS:
            assert not all(_agree(ref, ours, mode) for mode in MODES), pair.name


def test_registry_verdicts_on_the_fixed_shapes(
    verdicts: list[tuple[Pair, Verdict, Verdict]],
) -> None:
    """The shapes the registry used to get wrong, each with the verdict Avro gives too."""
    ours = {pair.name: registry for pair, _, registry in verdicts}
    assert ours["alias without namespace means the reader's"].backward is False
    assert ours["alias with the writer's full name"].backward is True
    assert ours["fixed into a union of two sizes"].backward is True
    assert ours["fixed into a union of the wrong size"].backward is False
    assert ours["reader field matches two writer fields"].backward is False
    for invalid in (
        "union of two ints",
        "union of two arrays",
        "union of two maps",
        "int default beyond 32 bits",
        "long default beyond 64 bits",
        "field type object of an object",
        "field type object naming a record",
        "field order sideways",
    ):
        assert ours[invalid].invalid == (False, True), invalid
    assert ours["union default of the second branch"].invalid == (False, False)
    assert ours["zero bytes default added"].backward is True


# Every incompatible direction of the corpus and of the compatibility matrix.
EXAMPLE_PAIRS = [
    *PAIRS,
    *(Pair(f"matrix: {case.name}", case.old, case.new) for case in AVRO_CASES),
]
# Of incompatible directions, those with an example Avro's decoder cannot read, where a
# datum can show the break at all: Avro's decoder reads a renamed record by its fields (the
# specification and Avro's SchemaCompatibility refuse it), so no datum shows a rename.
GOAL = 0.90

Examples = dict[str, tuple[set[str], list[Example]]]


@pytest.fixture(scope="module")
def examples() -> list[tuple[Pair, Examples, Verdict]]:
    """(pair, the registry's rules and examples by writing side, Avro's answers to them)."""
    found = [registry_examples(pair) for pair in EXAMPLE_PAIRS]
    sent = [[e for _, listed in by_writer.values() for e in listed] for by_writer in found]
    checked = reference_verdicts(EXAMPLE_PAIRS, sent)
    return list(zip(EXAMPLE_PAIRS, found, checked, strict=True))


def test_every_example_is_written_and_cannot_be_read_by_avro(
    examples: list[tuple[Pair, Examples, Verdict]],
) -> None:
    checked = [e for _, _, answered in examples for e in answered.examples]
    assert checked
    wrong = [
        f"{pair.name} ({e.writer} writes, {e.rule}): {json.dumps(e.datum)}: {e.error}"
        for pair, _, answered in examples
        for e in answered.examples
        if not e.written or e.read
    ]
    assert not wrong, "\n".join(wrong)


def test_most_incompatible_directions_have_an_example(
    examples: list[tuple[Pair, Examples, Verdict]],
) -> None:
    directions = [found for _, by_writer, _ in examples for found in by_writer.values()]
    shown = sum(bool(listed) for _, listed in directions)
    renamed = sum(not listed and rules == {"name-mismatch"} for rules, listed in directions)
    share, showable = shown / len(directions), shown / (len(directions) - renamed)
    print(
        f"\nAvro: {shown} of {len(directions)} incompatible directions ({share:.1%}) carry an"
        f" example Avro's decoder cannot read; {renamed} others are renamed records only, which"
        f" no datum shows; of the rest, {showable:.1%}"
    )
    assert showable >= GOAL
