"""Changes lost upstream (the changeserver's slot dropped and made again): the bridge is
told SNAPSHOT_TOO_OLD, snapshots every table again, and a consumer of its committed events
still ends with every row's newest state, with no eid twice, also when a peer of a fleet
that kept every change serves the read from the start. (A row deleted inside the gap has no
newer state to publish: a snapshot only carries the rows that exist.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import psycopg
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from changebroker.changeserver.server import ChangeServer
from changebroker.changeserver.server import Settings as ChangeServerSettings
from changebroker.chaos.faults import drop_slot_behind
from changebroker.stack.processes import wait_until
from changebroker.stack.run import serve_in_thread
from tests.bridge.test_snapshot import s_events
from tests.support.bridge_stack import Stack, rebuilding, snapshot_of

TABLE = "public.accounts"


def _accounts(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)")
        conn.execute("INSERT INTO accounts SELECT i, 0 FROM generate_series(1, 100) i")


def _run_done(stack: Stack, what: str, after: str | None = None) -> str:
    """The id of the table's snapshot run (a newer one than ``after``) once it is done."""

    def done() -> bool:
        run = snapshot_of(stack, TABLE)
        return run.get("id") != after and run.get("state") == "done"

    wait_until(done, timeout=60, what=what)
    return str(snapshot_of(stack, TABLE)["id"])


def test_a_gap_upstream_is_healed_by_a_new_snapshot(
    make_stack: Callable[..., Stack], kafka_bootstrap: str, pg_dsn: str
) -> None:
    _accounts(pg_dsn)
    stack = make_stack(kafka_bootstrap, on_slot_loss="recreate")
    with rebuilding(stack) as rebuilt:
        stack.start_bridge(include=(TABLE,))
        first = _run_done(stack, "snapshot")
        stack.sql("UPDATE accounts SET balance = 1 WHERE id <= 10")
        wait_until(lambda: rebuilt.equals_database([TABLE]), timeout=60, what="the first rows")

        # Writes right after the drop, while no slot exists: they are in no change log.
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            drop_slot_behind(pg_dsn, stack.publication)
            conn.execute("UPDATE accounts SET balance = 2 WHERE id > 90")
            conn.execute("INSERT INTO accounts VALUES (102, 2)")
        second = _run_done(stack, "a new snapshot after the gap", after=first)
        stack.sql("INSERT INTO accounts VALUES (101, 3)")
        wait_until(lambda: rebuilt.equals_database([TABLE]), timeout=60, what="the rebuilt table")
        assert rebuilt.duplicate_eids() == []
        runs = {e["metadata"]["flow_id"] for e in s_events(rebuilt)}
        assert runs == {f"snapshot:{first}", f"snapshot:{second}"}


def _balancer(server: str, peer: str) -> Starlette:
    """``/changes`` as a load balancer may route it: a read from the start to ``peer``, every
    other read to ``server``."""

    async def changes(request: Request) -> Response:
        target = peer if request.query_params.get("since") == "0.0.0" else server
        async with httpx.AsyncClient(timeout=60) as client:
            answer = await client.get(f"{target}/changes?{request.url.query}")
        media_type = answer.headers.get("content-type")
        return Response(answer.content, answer.status_code, media_type=media_type)

    return Starlette(routes=[Route("/changes", changes)])


def test_a_peer_that_kept_what_a_gap_took_makes_nothing_published_twice(
    make_stack: Callable[..., Stack],
    kafka_bootstrap: str,
    pg_dsn: str,
    tmp_path: Path,
    unique_name: Callable[[str], str],
) -> None:
    """A fleet: the bridge's server loses its slot and answers SNAPSHOT_TOO_OLD, and the read
    from the start that follows is served by a peer that kept every change. The changes
    published before the gap are not published again (their eids twice); the new run and
    the changes after the gap are."""
    _accounts(pg_dsn)
    stack = make_stack(kafka_bootstrap, on_slot_loss="recreate")
    slot = unique_name("peer")
    peer = ChangeServer(
        ChangeServerSettings(
            dsn=pg_dsn, slot=slot, db_dir=tmp_path / slot, publication=stack.publication
        )
    )
    with (
        serve_in_thread(peer.api_app) as peer_url,
        serve_in_thread(_balancer(stack.changeserver_url, peer_url)) as balanced,
        rebuilding(stack) as rebuilt,
    ):
        wait_until(peer.replicator.streaming.is_set, timeout=30, what="the peer's replication")
        stack.changeserver_url = balanced
        stack.start_bridge(include=(TABLE,))
        first = _run_done(stack, "snapshot")
        stack.sql("UPDATE accounts SET balance = 1 WHERE id <= 10")
        wait_until(lambda: rebuilt.equals_database([TABLE]), timeout=60, what="the updates")
        assert rebuilt.duplicate_eids() == []

        drop_slot_behind(pg_dsn, stack.publication)
        _run_done(stack, "a new snapshot after the gap", after=first)
        stack.sql("INSERT INTO accounts VALUES (101, 3)")
        wait_until(lambda: rebuilt.equals_database([TABLE]), timeout=60, what="the rebuilt table")
        assert rebuilt.duplicate_eids() == []
        changes = [e for e in rebuilt.events if e.get("data_op") in ("C", "U")]
        assert sorted(e["data"]["id"] for e in changes) == [*range(1, 11), 101]
        stack.stop_bridge()  # before the balancer it reads through goes
