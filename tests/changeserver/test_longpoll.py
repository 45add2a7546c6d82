"""block=: waiters wake on durable changes of their selectors, and only on those."""

from __future__ import annotations

import concurrent.futures
import email.utils
import logging
import socket
import time
from typing import Any

import psycopg
import pytest

from changebroker.stack.processes import wait_until
from tests.support.changeserver import Harness
from tests.support.raw_http import until_closed, without_date_and_flow_id


def _waiting(cs: Harness, *selectors: str) -> bool:
    registered = cs.server.state.waiters.by_selector
    return all(selector in registered for selector in selectors)


def _ids(body: dict[str, Any]) -> list[str]:
    return [c["newRow"]["id"]["value"] for c in body["changes"]]


def test_empty_block_returns_the_current_last_sequence(cs: Harness) -> None:
    cs.sql("INSERT INTO items VALUES (1, 'x', 'other')")
    last = cs.wait_for(1, scope="other")["lastSequence"]
    body = cs.changes(scope="a", since=last, block=1)
    assert body["changes"] == [] and body["lastSequence"] == last


def test_a_long_poll_is_dated_when_it_is_answered_not_when_it_arrived(cs: Harness) -> None:
    # The server's Date is renewed about once a second: after three seconds of blocking it
    # is past the second the request arrived in.
    arrived = time.time()
    response = cs.get(scope="a", block=3)
    assert response.status_code == 200 and response.json()["changes"] == []
    answered = email.utils.parsedate_to_datetime(response.headers["date"]).timestamp()
    assert answered > int(arrived)


def test_matching_insert_wakes_and_non_matching_does_not(cs: Harness) -> None:
    with concurrent.futures.ThreadPoolExecutor() as pool:
        waiter = pool.submit(cs.changes, scope="a", block=120)
        wait_until(lambda: _waiting(cs, "a"), timeout=30, what="the waiter")
        cs.sql("INSERT INTO items VALUES (1, 'x', 'b')")
        cs.wait_for(1, scope="b")
        assert not waiter.done()
        assert _waiting(cs, "a")
        cs.sql("INSERT INTO items VALUES (2, 'y', 'a')")
        # Well before block=120 runs out: only a wake can have answered.
        assert _ids(waiter.result(timeout=60)) == ["2"]


def test_two_selectors_and_snapshot(cs: Harness) -> None:
    with psycopg.connect(cs.dsn, autocommit=True) as conn:
        (snapshot,) = conn.execute("SELECT txid_current_snapshot()::text").fetchone() or ("",)
    with concurrent.futures.ThreadPoolExecutor() as pool:
        waiter = pool.submit(cs.changes, scope="a", selector="c", block=120, snapshot=snapshot)
        wait_until(lambda: _waiting(cs, "a", "c"), timeout=30, what="the waiter")
        cs.sql("INSERT INTO items VALUES (3, 'z', 'c')")
        body = waiter.result(timeout=60)
    assert _ids(body) == ["3"]
    assert cs.server.state.waiters.by_selector == {}


def _exchange(url: str, requests: list[str]) -> bytes:
    """``requests`` (GET paths) over one connection, the last with Connection: close."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        for index, path in enumerate(requests):
            last = index == len(requests) - 1
            connection = "Connection: close\r\n" if last else ""
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\n{connection}\r\n".encode())
        return until_closed(sock)


def test_a_woken_answer_is_the_bytes_an_immediate_one_would_be(
    cs: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """A wake writes the answer to the connection itself: the same bytes as answering at once,
    logged with its status and flow id, and a kept-alive connection goes on serving."""
    caplog.set_level(logging.INFO, logger="changebroker.access")
    since = cs.changes(scope="a")["lastSequence"]
    path = f"/changes?scope=a&since={since}&block=120"
    with concurrent.futures.ThreadPoolExecutor() as pool:
        woken = pool.submit(_exchange, cs.url, [path])
        kept_alive = pool.submit(_exchange, cs.url, [path, "/changes?scope=a&limit=0"])
        wait_until(
            lambda: len(cs.server.state.waiters.by_selector.get("a", ())) == 2,
            timeout=30,
            what="both waiters",
        )
        cs.sql("INSERT INTO items VALUES (1, 'x', 'a')")
        woken_bytes, kept_alive_bytes = woken.result(timeout=60), kept_alive.result(timeout=60)
    at_once = _exchange(cs.url, [path])
    assert b'"changes":[{' in at_once
    assert without_date_and_flow_id(woken_bytes) == without_date_and_flow_id(at_once)
    first, second = kept_alive_bytes.split(b"HTTP/1.1 200 OK", 2)[1:]
    keep_alive_first = without_date_and_flow_id(b"HTTP/1.1 200 OK" + first)
    assert keep_alive_first == without_date_and_flow_id(at_once).replace(
        b"connection: close\r\n", b""
    )
    assert b'"changes":[]' in second and b"connection: close" in second
    assert cs.server.state.waiters.by_selector == {}
    flow_ids = [
        line.split(b":", 1)[1].strip().decode()
        for line in (woken_bytes + kept_alive_bytes).split(b"\r\n")
        if line.lower().startswith(b"x-flow-id:")
    ]
    logged = {
        record.fields["status"]  # type: ignore[attr-defined]
        for record in caplog.records
        if record.name == "changebroker.access" and record.fields["path"] == "/changes"  # type: ignore[attr-defined]
    }
    assert len(flow_ids) == 3 and logged == {200}
