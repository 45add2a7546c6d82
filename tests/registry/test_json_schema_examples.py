"""Every JSON Schema incompatibility in the corpora, with the document that shows it.

For each incompatible verdict of the JSON Schema corpus (hand-written corners, the
compatibility matrix both ways, generated edits), each violation that claims a proven
example is checked with jsonschema, independently of the engine's own proof: the writer's
schema accepts the document and the reader's rejects it. A violation without a proof
carries no example. The share of incompatible verdicts with a proven example is printed
(run with -s) and may not fall below the goal the registry README states.
"""

from __future__ import annotations

import json

import pytest

from changebroker.registry.compat import Violation, json_schema_violations
from changebroker.registry.compat.json_schema import validator_class
from tests.registry.json_corpus import Pair, corpus

GOAL = 0.95  # of incompatible verdicts, those with a proven example


def _offline(pair: Pair) -> bool:
    return '"$ref": "http' not in json.dumps([pair.reader, pair.writer])


PAIRS = [p for p in corpus() if _offline(p)]


@pytest.fixture(scope="module")
def verdicts() -> list[tuple[Pair, list[Violation]]]:
    found = [(pair, json_schema_violations(pair.reader, pair.writer)) for pair in PAIRS]
    return [(pair, violations) for pair, violations in found if violations]


def test_every_proven_example_is_accepted_by_the_writer_and_rejected_by_the_reader(
    verdicts: list[tuple[Pair, list[Violation]]],
) -> None:
    wrong = []
    for pair, violations in verdicts:
        writer = validator_class(pair.writer)(pair.writer)
        reader = validator_class(pair.reader)(pair.reader)
        for violation in violations:
            if not violation.proven:
                assert violation.example is None, (pair.name, violation)
                continue
            if not writer.is_valid(violation.example) or reader.is_valid(violation.example):
                wrong.append(f"{pair.name}: {violation.rule} {json.dumps(violation.example)}")
    assert not wrong, "\n".join(wrong)


def test_most_incompatible_verdicts_are_proven(
    verdicts: list[tuple[Pair, list[Violation]]],
) -> None:
    proven = [pair.name for pair, violations in verdicts if any(v.proven for v in violations)]
    unproven = sorted({p.name for p, _ in verdicts} - set(proven))
    share = len(proven) / len(verdicts)
    print(
        f"\nJSON Schema: {len(proven)} of {len(verdicts)} incompatible verdicts ({share:.1%})"
        f" carry a proven example; without one: {', '.join(unproven)}"
    )
    assert share >= GOAL


def test_examples_off_builds_none() -> None:
    pair = next(p for p in PAIRS if json_schema_violations(p.reader, p.writer))
    quiet = json_schema_violations(pair.reader, pair.writer, examples=False)
    assert quiet and all(v.example is None and not v.proven for v in quiet)
