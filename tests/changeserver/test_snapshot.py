"""snapshot= hides exactly what was visible in a txid_current_snapshot()."""

from __future__ import annotations

import psycopg

from tests.support.changeserver import Harness


def test_snapshot_hides_exactly_the_visible_transactions(cs: Harness) -> None:
    cs.sql("INSERT INTO items VALUES (1, 'before', 's')")
    with psycopg.connect(cs.dsn) as open_tx, psycopg.connect(cs.dsn, autocommit=True) as reader:
        open_tx.execute("INSERT INTO items VALUES (2, 'in progress', 's')")
        (snapshot,) = reader.execute("SELECT txid_current_snapshot()::text").fetchone() or ("",)
        cs.sql("INSERT INTO items VALUES (3, 'after', 's')")
        open_tx.commit()
    every = cs.wait_for(3, scope="s")["changes"]
    assert [c["newRow"]["id"]["value"] for c in every] == ["1", "3", "2"]  # commit order

    hidden = cs.changes(scope="s", snapshot=snapshot)["changes"]
    assert [c["newRow"]["id"]["value"] for c in hidden] == ["3", "2"]

    assert cs.get(scope="s", snapshot="nonsense").json()["code"] == "PARAMETER_INVALID"
