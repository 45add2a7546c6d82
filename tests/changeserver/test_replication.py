"""The replication client: confirms what is durable, and reconnects when the stream drops."""

from __future__ import annotations

import psycopg

from changebroker.stack.processes import wait_until
from tests.support.changeserver import Harness, MakeServer


def _slot(cs: Harness) -> tuple[int | None, int]:
    """(walsender pid or None, confirmed_flush_lsn as an integer)."""
    with psycopg.connect(cs.dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT active_pid, confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots"
            " WHERE slot_name = %s",
            (cs.server.settings.slot,),
        ).fetchone()
    assert row is not None
    return row[0], int(row[1])


def test_durable_changes_are_confirmed(cs: Harness) -> None:
    cs.sql("INSERT INTO items VALUES (1, 'x', 'a')")
    commit_lsn = cs.wait_for(1, scope="a")["changes"][0]["commitSequence"]
    wait_until(lambda: _slot(cs)[1] > commit_lsn, timeout=30, what="the slot to confirm")


def test_reconnects_after_the_stream_drops(cs: Harness) -> None:
    pid, _ = _slot(cs)
    assert pid is not None
    with psycopg.connect(cs.dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    cs.sql("INSERT INTO items VALUES (1, 'after the drop', 'a')")
    changes = cs.wait_for(1, scope="a")["changes"]
    assert [c["newRow"]["name"]["value"] for c in changes] == ["after the drop"]
    new_pid, _ = _slot(cs)
    assert new_pid not in (None, pid)


def test_idle_slot_follows_wal_it_has_no_changes_for(cs: Harness) -> None:
    # WAL with nothing to publish (a logical message the stream does not ask for): the
    # slot must still advance past it, or WAL piles up while the server is healthy.
    with psycopg.connect(cs.dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pg_logical_emit_message(false, 'changeserver-test', 'x') - '0/0'::pg_lsn"
        ).fetchone()
    assert row is not None
    written = int(row[0])
    wait_until(lambda: _slot(cs)[1] >= written, timeout=30, what="the slot to pass idle WAL")


def test_publication_of_listed_tables_or_an_existing_one(make_server: MakeServer) -> None:
    listed = make_server(tables=("public.items",))
    listed.sql("CREATE TABLE other (id int PRIMARY KEY, _change_selector text)")
    listed.sql("CREATE PUBLICATION mine FOR TABLE other")
    existing = make_server(publication="mine")
    listed.sql("INSERT INTO other VALUES (1, 'p')")
    listed.sql("INSERT INTO items VALUES (2, 'x', 'p')")
    listed.sql("INSERT INTO other VALUES (3, 'p')")
    # Commit order: once the later change is served, the earlier ones were seen (or skipped).
    assert [c["table"] for c in listed.wait_for(1, scope="p")["changes"]] == ["public.items"]
    tables = [c["table"] for c in existing.wait_for(2, scope="p")["changes"]]
    assert tables == ["public.other", "public.other"]
