"""GET /changes against a real Postgres: sequences, selectors, limit, errors."""

from __future__ import annotations

from tests.changeserver.conftest import Harness


def test_empty_database_gives_zero_sequences(cs: Harness) -> None:
    body = cs.changes(scope="a")
    assert body == {"firstSequence": "0.0.0", "lastSequence": "0.0.0", "changes": []}


def test_first_change_and_the_next_by_since(cs: Harness) -> None:
    cs.sql("INSERT INTO items VALUES (1, 'one', 'a')")
    first = cs.wait_for(1, scope="a")["changes"][0]
    assert first["operation"] == 1
    assert first["table"] == "public.items"
    assert first["newRow"]["name"] == {"value": "one", "type": 25}
    assert first["newRow"]["id"] == {"value": "1", "type": 23}
    assert first["commitIndex"] == 0
    assert first["sequence"].endswith(".0")

    cs.sql("UPDATE items SET name = 'uno' WHERE id = 1")
    after = cs.wait_for(1, scope="a", since=first["sequence"])
    assert [c["operation"] for c in after["changes"]] == [2]
    assert after["changes"][0]["newRow"]["name"]["value"] == "uno"
    assert after["lastSequence"] == after["changes"][0]["sequence"]
    assert after["changes"][0]["commitSequence"] > first["commitSequence"]
