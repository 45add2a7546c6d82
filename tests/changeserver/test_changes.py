"""GET /changes against a real Postgres: sequences, selectors, limit, errors."""

from __future__ import annotations

import json

import httpx

from changebroker.changeserver import changes
from changebroker.changeserver.changelog import LogReader
from changebroker.changeserver.sequence import ZERO
from tests.support.changeserver import Harness, MakeServer, conforms


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


def test_alternate_selector_column(make_server: MakeServer) -> None:
    cs = make_server(selector_column="tenant")
    cs.sql("CREATE TABLE accounts (id int PRIMARY KEY, tenant text, _change_selector text)")
    cs.sql("INSERT INTO accounts VALUES (1, 'acme', 'other')")
    body = cs.wait_for(1, scope="acme")
    assert [c["newRow"]["id"]["value"] for c in body["changes"]] == ["1"]
    assert cs.changes(scope="other")["changes"] == []


def test_one_transaction_shares_commit_sequence(cs: Harness) -> None:
    cs.sql(
        "INSERT INTO items VALUES (1, 'x', 'a'), (2, 'y', 'a');"
        " UPDATE items SET name = 'z' WHERE id = 1"
    )
    changes = cs.wait_for(3, scope="a")["changes"]
    assert len({c["commitSequence"] for c in changes}) == 1
    assert [c["commitIndex"] for c in changes] == [0, 1, 2]
    assert [c["operation"] for c in changes] == [1, 1, 2]
    txids = {c["txid"] for c in changes}
    assert len(txids) == 1
    assert [c["sequence"].split(".")[2] for c in changes] == ["0", "1", "2"]
    assert changes[0]["changeSequence"] < changes[2]["changeSequence"]


def test_unmatched_selector_gives_nothing_and_selectors_or(cs: Harness) -> None:
    cs.sql("INSERT INTO items VALUES (1, 'x', 'a')")
    cs.sql("INSERT INTO items VALUES (2, 'y', 'b')")
    cs.sql("INSERT INTO items VALUES (3, 'z', 'c')")
    both = cs.wait_for(2, scope="a", selector="c")["changes"]
    assert [c["newRow"]["id"]["value"] for c in both] == ["1", "3"]
    nothing = cs.changes(scope="nobody")
    assert nothing["changes"] == []
    assert nothing["lastSequence"] == both[-1]["sequence"]


def test_limit(cs: Harness) -> None:
    for number in range(3):
        cs.sql("INSERT INTO items VALUES (%s, 'x', 'a')", (number,))
    every = cs.wait_for(3, scope="a")["changes"]
    last = every[-1]["sequence"]

    none = cs.changes(scope="a", limit=0)
    assert none["changes"] == [] and none["lastSequence"] == last

    one = cs.changes(scope="a", limit=1)
    assert [c["sequence"] for c in one["changes"]] == [every[0]["sequence"]]
    assert one["lastSequence"] == every[0]["sequence"]  # cut by limit: the last returned

    most = cs.changes(scope="a", limit=100_000)
    assert len(most["changes"]) == 3 and most["lastSequence"] == last


def test_old_row_wins_the_selector(cs: Harness) -> None:
    cs.sql("ALTER TABLE items REPLICA IDENTITY FULL")
    cs.sql("INSERT INTO items VALUES (1, 'x', 'a')")
    cs.sql("UPDATE items SET _change_selector = 'b' WHERE id = 1")
    cs.sql("DELETE FROM items WHERE id = 1")
    changes = cs.wait_for(2, scope="a")["changes"]
    assert [c["operation"] for c in changes] == [1, 2]
    assert changes[1]["oldRow"]["_change_selector"]["value"] == "a"
    assert changes[1]["newRow"]["_change_selector"]["value"] == "b"
    deleted = cs.wait_for(1, scope="b")["changes"]
    assert [c["operation"] for c in deleted] == [3]
    assert deleted[0]["oldRow"]["name"]["value"] == "x"
    assert "newRow" not in deleted[0]


def test_errors(cs: Harness) -> None:
    for params in ({"scope": "UPPER"}, {"selector": "a b"}, {"scope": ""}, {"since": "x"}):
        response = cs.get(**params)
        assert response.status_code == 400, params
        body = response.json()
        assert set(body) == {"code", "error", "description"}
        conforms(body, "Error")
        assert body["code"] == "PARAMETER_INVALID"
    response = cs.get(accept="text/html", scope="a")
    assert response.status_code == 415
    assert response.json()["code"] == "UNSUPPORTED_FORMAT"
    assert cs.get(accept="application/json", scope="a").status_code == 200
    assert cs.get(accept="*/*", scope="a").status_code == 200


def test_prefix_moves_changes(make_server: MakeServer) -> None:
    cs = make_server(prefix="v1/")
    assert httpx.get(f"{cs.url}/v1/changes", params={"scope": "a"}).status_code == 200
    assert httpx.get(f"{cs.url}/changes", params={"scope": "a"}).status_code == 404


def test_a_truncate_is_no_change_in_transicator_s_list_and_the_stream_goes_on(
    cs: Harness,
) -> None:
    # Transicator's operations are 1-3: a reader from the beginning gets those alone (a
    # reader past the truncate is told SNAPSHOT_TOO_OLD: test_table_events.py).
    cs.sql("INSERT INTO items VALUES (1, 'x', 'a')")
    cs.sql("TRUNCATE items")
    cs.sql("INSERT INTO items VALUES (1, 'again', 'a')")
    changes = cs.wait_for(2, scope="a")["changes"]
    assert [(c["operation"], c["newRow"]["name"]["value"]) for c in changes] == [
        (1, "x"),
        (1, "again"),
    ]


def test_each_change_keeps_the_columns_of_its_time(cs: Harness) -> None:
    # Rows are decoded when served, against the relation each change was stored with.
    cs.sql("INSERT INTO items VALUES (1, 'before', 'a')")
    cs.sql("ALTER TABLE items ADD COLUMN extra int")
    cs.sql("INSERT INTO items VALUES (2, 'after', 'a', 7)")
    cs.sql("ALTER TABLE items DROP COLUMN extra")
    cs.sql("INSERT INTO items VALUES (3, 'again', 'a')")
    rows = [c["newRow"] for c in cs.wait_for(3, scope="a")["changes"]]
    assert [sorted(row) for row in rows] == [
        ["_change_selector", "id", "name"],
        ["_change_selector", "extra", "id", "name"],
        ["_change_selector", "id", "name"],
    ]
    assert rows[1]["extra"] == {"value": "7", "type": 23}
    # A fresh reader (as after a restart) decodes them from the relations the log stored.
    reader = LogReader(cs.server.changelog.path)
    _, stored = reader.read(["a"], ZERO, 10, None)
    assert [json.loads(changes.to_json(*row, reader.relation))["newRow"] for row in stored] == rows
    reader.close()
