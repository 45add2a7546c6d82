"""A replication slot dropped or invalidated behind the changeserver's back: never a silent
gap. ``fail`` stops and says so in /health and /ready; ``recreate`` goes on from a new slot
and readers of positions from before the gap get SNAPSHOT_TOO_OLD."""

from __future__ import annotations

import contextlib

import httpx
import psycopg
import pytest

from changebroker.changeserver.replication import SlotLost, ensure_slot
from changebroker.changeserver.server import ChangeServer, Settings
from changebroker.chaos.faults import drop_slot_behind
from changebroker.stack.processes import wait_until
from changebroker.stack.run import serve_in_thread
from tests.support.changeserver import Harness, MakeServer


def test_a_dropped_slot_is_reported_by_health_and_ready_under_fail(make_server: MakeServer) -> None:
    cs = make_server(separate_management=True)
    cs.sql("INSERT INTO items VALUES (1, 'a', 's')")
    cs.wait_for(1, scope="s")
    drop_slot_behind(cs.dsn, cs.server.settings.slot)

    def reported() -> bool:
        return httpx.get(f"{cs.mgmt_url}/health", timeout=10).status_code == 503

    wait_until(reported, timeout=30, what="/health to report the lost slot")
    health = httpx.get(f"{cs.mgmt_url}/health", headers={"accept": "application/json"})
    assert health.json()["status"] == "Down", health.text
    assert "was dropped" in health.json()["reason"], health.text
    ready = httpx.get(f"{cs.mgmt_url}/ready")
    assert ready.status_code == 503 and "was dropped" in ready.text, ready.text
    metrics = httpx.get(f"{cs.mgmt_url}/metrics").text
    assert 'changebroker_changeserver_slot_losses_total{policy="fail"}' in metrics
    with psycopg.connect(cs.dsn) as conn:  # not silently created again
        slots = conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
            (cs.server.settings.slot,),
        ).fetchone()
    assert slots == (0,)


def test_a_dropped_slot_is_recreated_and_older_positions_are_too_old(
    make_server: MakeServer,
) -> None:
    cs = make_server(on_slot_loss="recreate")
    cs.sql("INSERT INTO items VALUES (1, 'before', 's')")
    before = cs.wait_for(1, scope="s")["changes"][-1]["sequence"]
    drop_slot_behind(cs.dsn, cs.server.settings.slot)
    wait_until(
        lambda: cs.server.replicator.slot_losses == 1 and cs.server.replicator.streaming.is_set(),
        timeout=30,
        what="the slot recreated",
    )
    _goes_on_after_the_gap(cs, before)
    ready = httpx.get(f"{cs.mgmt_url}/ready")
    assert ready.status_code == 200, ready.text


def _goes_on_after_the_gap(cs: Harness, before: str) -> None:
    """A change made now is served, and ``before`` (a position from before the gap) is too
    old."""
    cs.sql("INSERT INTO items VALUES (3, 'after', 's')")
    after = cs.wait_for(1, scope="s")["changes"]
    assert [c["newRow"]["name"]["value"] for c in after] == ["after"]
    too_old = cs.get(scope="s", since=before)
    assert too_old.status_code == 400, too_old.text
    assert too_old.json()["code"] == "SNAPSHOT_TOO_OLD", too_old.text


def test_a_new_slot_whose_connection_breaks_is_made_again(make_server: MakeServer) -> None:
    """The connection that creates the new slot breaks (as a network fault or a restarted
    Postgres ends it): the changeserver tries again until it streams, and never from a slot
    made before its change log declared the gap."""
    cs = make_server(on_slot_loss="recreate")
    cs.sql("INSERT INTO items VALUES (1, 'before', 's')")
    before = cs.wait_for(1, scope="s")["changes"][-1]["sequence"]
    creating = (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND query LIKE 'SELECT pg_create_logical_replication_slot%' AND state = 'active'"
    )
    # A transaction with an xid holds the new slot's creation until it ends: the moment to
    # end the creating backend.
    with psycopg.connect(cs.dsn) as holder, psycopg.connect(cs.dsn, autocommit=True) as admin:
        holder.execute("INSERT INTO items VALUES (2, 'rolled back', 's')")
        drop_slot_behind(cs.dsn, cs.server.settings.slot)
        found: list[int] = []

        def creating_slot() -> bool:
            found[:] = [pid for (pid,) in admin.execute(creating).fetchall()]
            return bool(found)

        wait_until(creating_slot, timeout=30, what="the new slot's creation")
        admin.execute("SELECT pg_terminate_backend(%s)", (found[0],))
        holder.rollback()
    wait_until(
        lambda: cs.server.replicator.streaming.is_set(), timeout=60, what="the slot recreated"
    )
    assert cs.server.replicator.slot_losses == 1
    _goes_on_after_the_gap(cs, before)


def test_an_invalidated_slot_is_detected_when_the_changeserver_starts_again(
    make_server: MakeServer, pg_server_dsn: str
) -> None:
    cs = make_server()
    cs.sql("INSERT INTO items VALUES (1, 'a', 's')")
    cs.wait_for(1, scope="s")
    cs.stop()
    slot = cs.server.settings.slot
    # Postgres may now drop WAL the (inactive) slot still needs: it does at the checkpoint.
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
        conn.execute("SELECT pg_reload_conf()")
    try:
        with psycopg.connect(cs.dsn, autocommit=True) as conn:
            for row in range(2, 6):  # WAL in several segments, past the slot's restart point
                conn.execute("INSERT INTO items VALUES (%s, 'gone', 's')", (row,))
                conn.execute("SELECT pg_switch_wal()")
            conn.execute("CHECKPOINT")
            status = conn.execute(
                "SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (slot,)
            ).fetchone()
        assert status == ("lost",), status
    finally:
        with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
            conn.execute("SELECT pg_reload_conf()")

    again = ChangeServer(Settings(dsn=cs.dsn, slot=slot, db_dir=cs.server.settings.db_dir))
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(serve_in_thread(again.api_app))
        wait_until(
            lambda: again.replicator.failure is not None, timeout=30, what="the loss detected"
        )
        assert "invalidated" in str(again.replicator.failure)
        health = httpx.get(f"{url}/health")
        assert health.status_code == 503 and "invalidated" in health.text, health.text


def test_a_slot_we_streamed_from_is_never_made_again_silently(pg_dsn: str) -> None:
    # The reconnect path checks and creates in one step: a slot dropped between a check and a
    # create would otherwise start anew at the current WAL position, skipping what came between.
    ensure_slot(pg_dsn, "t_once", "t_once_pub")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot('t_once')")
    with pytest.raises(SlotLost, match="was dropped"):
        ensure_slot(pg_dsn, "t_once", "t_once_pub", streamed_before=True)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 't_once'"
        ).fetchone()
    assert left == (0,)
