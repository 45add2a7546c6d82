"""A replication connection that goes silent (a black-holed network path: no error, no
data) is noticed: the changeserver is not ready while it cannot stream, and goes on once
the path is back, nothing lost."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import httpx
import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from changebroker.changeserver.server import ChangeServer, Settings
from changebroker.chaos.proxy import BLACKHOLE, PASS, Link, Proxies
from changebroker.stack.processes import free_port, wait_until
from changebroker.stack.run import serve_in_thread
from tests.support.changeserver import TABLE


def test_a_black_holed_replication_connection_is_not_ready_then_resumes(
    pg_dsn: str, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(TABLE)
    proxies = Proxies([Link("pg", free_port(), int(conninfo_to_dict(pg_dsn)["port"] or 5432))])
    proxies.start()
    proxied = make_conninfo(pg_dsn, port=str(proxies.links["pg"].listen_port))
    server = ChangeServer(
        Settings(dsn=proxied, slot=unique_name("silent"), db_dir=tmp_path / "log")
    )
    with contextlib.ExitStack() as stack:
        stack.callback(proxies.stop)
        url = stack.enter_context(serve_in_thread(server.api_app))
        wait_until(server.replicator.streaming.is_set, timeout=30, what="replication")
        assert httpx.get(f"{url}/ready").status_code == 200

        proxies.set("pg", BLACKHOLE)
        wait_until(
            lambda: httpx.get(f"{url}/ready").status_code == 503,
            timeout=40,
            what="not ready while nothing comes through",
        )
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # straight, not through it
            conn.execute("INSERT INTO items VALUES (1, 'while silent', 's')")

        proxies.set("pg", PASS)
        wait_until(server.replicator.streaming.is_set, timeout=60, what="streaming again")

        def served() -> bool:
            body = httpx.get(f"{url}/changes", params={"scope": "s"}).json()
            return [c["newRow"]["id"]["value"] for c in body["changes"]] == ["1"]

        wait_until(served, timeout=30, what="the change made while silent")
