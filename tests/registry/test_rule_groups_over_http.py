"""The four rule groups through the real API on Postgres, each change both ways: what breaks
no document registers; what breaks one is refused with 409, and a violation carries a proven
example that jsonschema confirms (the old schema accepts it, the new one rejects it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from changebroker.registry.compat.json_schema import validator_class
from tests.registry.rule_groups_corpus import CHANGES, D2020, Change

# (change, first registered, then sent, whether the second must register)
CHECKS = [(c, c.old, c.new, c.backward) for c in CHANGES]
CHECKS += [(c, c.new, c.old, c.forward) for c in CHANGES]


def _subject(client: httpx.Client, subject: str) -> str:
    meta = {"tenant": "t", "namespace": "n", "status": "released", "compatibility": "BACKWARD"}
    assert client.post(f"/subjects/{subject}", json=meta).status_code == 200
    return f"/subjects/{subject}/versions"


def _register(client: httpx.Client, versions: str, schema: Any) -> httpx.Response:
    return client.post(versions, json={"serialization": "JSON", "schemaDefinition": schema})


def test_the_corpus_covers_each_group_both_ways() -> None:
    assert len(CHECKS) >= 60
    for group in ("patternProperties", "not", "dependencies", "unevaluated"):
        kinds = {ok for c, _, _, ok in CHECKS if c.group == group}
        assert kinds == {True, False}, group


@pytest.mark.parametrize(
    ("change", "first", "second", "registers"),
    CHECKS,
    ids=[
        f"{c.group}: {c.name} ({'old, new' if i < len(CHANGES) else 'new, old'})"
        for i, (c, _, _, _) in enumerate(CHECKS)
    ],
)
def test_change_over_http(
    client: httpx.Client,
    unique_name: Callable[[str], str],
    change: Change,
    first: Any,
    second: Any,
    registers: bool,
) -> None:
    versions = _subject(client, unique_name("groups"))
    assert _register(client, versions, first).status_code == 200
    answer = _register(client, versions, second)
    if registers:
        assert answer.status_code == 200, answer.text
        return
    assert answer.status_code == 409, answer.text
    violations = answer.json()["violations"]
    proven = [v for v in violations if v["proven"]]
    assert proven, violations
    writer, reader = validator_class(first)(first), validator_class(second)(second)
    for violation in proven:
        assert writer.is_valid(violation["example"]), violation
        assert not reader.is_valid(violation["example"]), violation


def test_a_cautious_answer_says_so_and_shows_nothing(
    client: httpx.Client, unique_name: Callable[[str], str]
) -> None:
    # Which properties the anyOf evaluates depends on the document: the engine spells
    # unevaluatedProperties as if none were evaluated, which refuses a change that breaks
    # nothing, and says that it is only cautious.
    old = {"$schema": D2020, "anyOf": [{"properties": {"a": {}}}], "unevaluatedProperties": False}
    new = {**old, "description": "the same documents"}
    versions = _subject(client, unique_name("cautious"))
    assert _register(client, versions, old).status_code == 200
    answer = _register(client, versions, new)
    assert answer.status_code == 409, answer.text
    violations = answer.json()["violations"]
    assert violations and all(v["example"] is None and not v["proven"] for v in violations)
    assert any("cautious" in v["message"] for v in violations)
