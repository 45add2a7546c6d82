"""block=: waiters wake on durable changes of their selectors, and only on those."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import psycopg

from changebroker.stack.processes import wait_until
from tests.support.changeserver import Harness


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
