"""What a changeserver does for the other servers of a fleet: a ``since`` it has not reached
yet (another server answered it) waits until it has, and never sends the client back; its
management port hands a peer a copy of its change log (``GET /changelog``)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from changebroker.chaos.proxy import CUT, PASS, Link, Proxies
from changebroker.stack.processes import free_port, wait_until
from tests.support.changeserver import Harness, MakeServer


def _last(cs: Harness, count: int) -> str:
    sequence: str = cs.wait_for(count, scope="a")["changes"][-1]["sequence"]
    return sequence


def test_a_since_not_reached_yet_waits_until_the_server_has_it(
    make_server: MakeServer, pg_dsn: str
) -> None:
    ahead = make_server()
    port = psycopg.conninfo.conninfo_to_dict(pg_dsn)["port"] or 5432
    link = Link("postgres", free_port(), int(port))
    proxies = Proxies([link])
    proxies.start()
    try:
        behind = make_server(dsn=psycopg.conninfo.make_conninfo(pg_dsn, port=link.listen_port))
        ahead.sql("INSERT INTO items VALUES (1, 'one', 'a')")
        assert _last(ahead, 1) == _last(behind, 1)
        proxies.set("postgres", CUT)  # the behind server's replication stops
        wait_until(lambda: not behind.server.replicator.streaming.is_set(), timeout=30, what="cut")
        ahead.sql("INSERT INTO items VALUES (2, 'two', 'a')")
        since = _last(ahead, 2)

        # Past block: nothing, and lastSequence the client's own, not the server's older one.
        started = time.monotonic()
        answer = behind.changes(scope="a", since=since, block=2)
        assert time.monotonic() - started >= 1.9
        assert answer["changes"] == [] and answer["lastSequence"] == since

        # Caught up within block: the next change after since, as the other server gives it.
        answers: list[dict[str, Any]] = []
        poll = threading.Thread(
            target=lambda: answers.append(behind.changes(scope="a", since=since, block=60))
        )
        poll.start()
        wait_until(lambda: behind.server.state.waiters.waiting == 1, timeout=30, what="parked")
        ahead.sql("INSERT INTO items VALUES (3, 'three', 'a')")
        proxies.set("postgres", PASS)
        poll.join(timeout=60)
        expected = ahead.changes(scope="a", since=since)["changes"]
        assert [c["newRow"]["id"]["value"] for c in expected] == ["3"]
        assert answers[0]["changes"] == expected
    finally:
        proxies.stop()


@pytest.fixture
def peer(make_server: MakeServer) -> Harness:
    return make_server(separate_management=True)


def test_a_peer_copy_of_the_change_log(peer: Harness, tmp_path: Path) -> None:
    peer.sql("INSERT INTO items VALUES (1, 'one', 'a')")
    first = peer.wait_for(1, scope="a")
    url = f"{peer.mgmt_url}/changelog"

    refused = httpx.get(url, params={"through": "x"})
    assert refused.status_code == 400 and refused.json()["code"] == "PARAMETER_INVALID"
    early = httpx.get(url, params={"through": str(2**62)})
    assert early.status_code == 503 and early.json()["code"] == "BEHIND"

    copy = httpx.get(url, params={"through": "0"})
    assert copy.status_code == 200
    assert int(copy.headers["x-changelog-through"]) >= 1
    (tmp_path / "copy.sqlite").write_bytes(copy.content)
    with sqlite3.connect(tmp_path / "copy.sqlite") as log:
        assert log.execute("SELECT count(*) FROM changes").fetchone() == (1,)
        meta = dict(log.execute("SELECT key, value FROM meta").fetchall())
    assert (
        f"{meta['first_lsn'] >> 32:x}.{meta['first_lsn'] & 0xFFFFFFFF:x}.0"
        == first["firstSequence"]
    )
    folder = peer.server.changelog.path.parent
    wait_until(lambda: not list(folder.glob("seed-*")), timeout=10, what="the copy removed")

    assert httpx.get(f"{peer.mgmt_url}/markdown").status_code == 200
    down = httpx.get(url, params={"through": "0"})
    assert down.status_code == 503 and down.json()["code"] == "MARKED_DOWN"
