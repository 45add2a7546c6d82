"""Retention by age: whole transactions go, first/last stay right, older since is too old."""

from __future__ import annotations

import sqlite3
import time

from changebroker.stack.processes import wait_until
from tests.support.changeserver import Harness, MakeServer


def _commit_times(cs: Harness) -> list[int]:
    with sqlite3.connect(cs.server.changelog.path) as conn:
        return [t for (t,) in conn.execute("SELECT unix_us FROM commits ORDER BY lsn")]


def _listed_selectors(cs: Harness) -> set[str]:
    with sqlite3.connect(cs.server.changelog.path) as conn:
        return {s for (s,) in conn.execute("SELECT selector FROM selectors")}


def test_purge_keeps_first_and_last_right(cs: Harness) -> None:
    cs.sql("INSERT INTO items VALUES (1, 'x', 'a'); INSERT INTO items VALUES (2, 'x', 'b')")
    cs.sql("INSERT INTO items VALUES (3, 'y', 'a')")
    cs.sql("INSERT INTO items VALUES (4, 'z', 'a')")
    seqs = [c["sequence"] for c in cs.wait_for(4, scope="a", selector="b")["changes"]]
    first_commit, second_commit, _ = _commit_times(cs)
    assert first_commit < second_commit
    assert _listed_selectors(cs) == {"a", "b"}

    assert cs.server.changelog.purge(second_commit) == 2  # the first transaction, whole
    assert _listed_selectors(cs) == {"a"}  # b had nothing else
    body = cs.changes(scope="a", selector="b")
    assert [c["sequence"] for c in body["changes"]] == seqs[2:]
    assert body["firstSequence"] == seqs[2] and body["lastSequence"] == seqs[3]
    too_old = cs.get(scope="a", since=seqs[0])
    assert too_old.status_code == 400 and too_old.json()["code"] == "SNAPSHOT_TOO_OLD"
    assert cs.changes(scope="a", since=seqs[1])["changes"][0]["sequence"] == seqs[2]

    assert cs.server.changelog.purge(int(time.time() * 1e6) + 10_000_000) == 2
    emptied = cs.changes(scope="a", since="0.0.0")
    assert emptied["changes"] == []
    assert _listed_selectors(cs) == set()
    assert emptied["firstSequence"] == emptied["lastSequence"] == seqs[3]
    assert cs.get(scope="a", since=seqs[2]).json()["code"] == "SNAPSHOT_TOO_OLD"
    assert cs.changes(scope="a", since=seqs[3])["changes"] == []

    cs.sql("INSERT INTO items VALUES (5, 'n', 'a')")
    after = cs.wait_for(1, scope="a", since=seqs[3])
    assert after["firstSequence"] == after["lastSequence"] == after["changes"][0]["sequence"]


def test_max_age_purges_in_the_background(make_server: MakeServer) -> None:
    cs = make_server(max_age=0.2)
    cs.sql("INSERT INTO items VALUES (1, 'x', 'a')")
    cs.sql("INSERT INTO items VALUES (2, 'x', 'a')")
    first = cs.wait_for(1, scope="a")["changes"][0]["sequence"]

    def purged() -> bool:
        return cs.get(scope="a", since=first).status_code == 400

    wait_until(purged, timeout=30, what="retention to purge")
    assert cs.get(scope="a", since=first).json()["code"] == "SNAPSHOT_TOO_OLD"
