"""Requests exactly as transicator's own changeserver tests send them (raw query strings), and
the answers they expect: no selector, limit and block bounds, since before the log began.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

import httpx

from changebroker.changeserver.sequence import Sequence
from changebroker.stack.processes import wait_until
from tests.support.changeserver import Harness, conforms


def _get(cs: Harness, query: str, accept: str = "application/json") -> httpx.Response:
    return httpx.get(f"{cs.url}/changes?{query}", headers={"accept": accept}, timeout=60)


def _ok(cs: Harness, query: str) -> dict[str, Any]:
    response = _get(cs, query)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    conforms(body, "ChangeList")
    return body


def _error(cs: Harness, query: str) -> dict[str, Any]:
    response = _get(cs, query)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    body: dict[str, Any] = response.json()
    conforms(body, "Error")
    return body


def _ids(body: dict[str, Any]) -> list[str]:
    return [c["newRow"]["id"]["value"] for c in body["changes"]]


def test_no_selector_serves_rows_whose_selector_is_null_empty_or_missing(cs: Harness) -> None:
    cs.sql("CREATE TABLE plain (id int PRIMARY KEY)")
    cs.sql("INSERT INTO items VALUES (1, 'null', NULL)")
    cs.sql("INSERT INTO items VALUES (2, 'empty', '')")
    cs.sql("INSERT INTO plain VALUES (3)")
    cs.sql("INSERT INTO items VALUES (4, 'named', 'foo')")
    cs.wait_for(1, scope="foo")

    unnamed = _ok(cs, "since=0.0.0")
    assert _ids(unnamed) == ["1", "2", "3"]
    assert [c["table"] for c in unnamed["changes"]] == ["public.items"] * 2 + ["public.plain"]
    assert _ids(_ok(cs, "")) == ["1", "2", "3"]
    assert _ids(_ok(cs, "scope=foo")) == ["4"]
    assert _ids(_ok(cs, "scope=foo&selector=foo")) == ["4"]  # named twice, served once
    # The empty selector cannot be named: only a request naming none gets it.
    assert _error(cs, "scope=")["code"] == "PARAMETER_INVALID"
    assert _error(cs, "scope=foo&selector=")["code"] == "PARAMETER_INVALID"

    # An old row's NULL selector does not win: a key-only one (the key changed) has NULL for
    # every column outside the key, and a row moving from no selector to one is the new one's.
    cs.sql("UPDATE items SET id = 40 WHERE id = 4")
    assert _ids(cs.wait_for(2, scope="foo")) == ["4", "40"]
    cs.sql("ALTER TABLE items REPLICA IDENTITY FULL")
    cs.sql("UPDATE items SET _change_selector = 'foo' WHERE id = 1")
    assert _ids(cs.wait_for(3, scope="foo")) == ["4", "40", "1"]
    cs.sql("UPDATE items SET _change_selector = NULL WHERE id = 1")  # the old row's foo wins
    assert _ids(cs.wait_for(4, scope="foo")) == ["4", "40", "1", "1"]
    assert _ids(_ok(cs, "")) == ["1", "2", "3"]


def test_long_polling_no_selector(cs: Harness) -> None:
    last = _ok(cs, "")["lastSequence"]
    with concurrent.futures.ThreadPoolExecutor() as pool:
        waiter = pool.submit(_ok, cs, f"since={last}&block=30")
        wait_until(lambda: "" in cs.server.state.waiters.by_selector, timeout=30, what="waiter")
        cs.sql("INSERT INTO items VALUES (7, 'x', 'foo')")
        cs.wait_for(1, scope="foo")
        assert not waiter.done()
        cs.sql("INSERT INTO items (id, name, _change_selector) VALUES (8, 'y', '')")
        assert _ids(waiter.result(timeout=25)) == ["8"]  # well before block=30: a wake


def test_rows_without_a_selector_are_purged_with_their_transaction(cs: Harness) -> None:
    cs.sql("INSERT INTO items VALUES (1, 'x', NULL); INSERT INTO items VALUES (2, 'y', 'foo')")
    cs.wait_for(1, scope="foo")
    assert cs.server.changelog.purge(2**62) == 2
    body = _ok(cs, "")
    assert body["changes"] == [] and body["firstSequence"] == body["lastSequence"]


def test_limit_bounds_as_transicator(cs: Harness) -> None:
    for number in range(3):
        cs.sql("INSERT INTO items VALUES (%s, 'x', 'foo')", (number,))
    every = cs.wait_for(3, scope="foo")
    last = every["lastSequence"]

    over = _error(cs, "since=0.0.0&scope=foo&limit=100001")
    assert over["code"] == "PARAMETER_INVALID"
    assert over["description"] == "limit too high, exceeds max 100000"
    assert len(_ok(cs, "since=0.0.0&scope=foo&limit=100000")["changes"]) == 3
    for bad in ("abc", "1.5", "1_0", "2147483648", " 1"):
        assert _error(cs, f"scope=foo&limit={bad}")["code"] == "PARAMETER_INVALID", bad
    # Zero or negative: no changes, the bounds only (transicator returns nothing either).
    for empty in ("0", "-1", "-2147483648"):
        body = _ok(cs, f"scope=foo&limit={empty}")
        assert body["changes"] == [] and body["lastSequence"] == last, empty
    assert _ids(_ok(cs, "scope=foo&limit=%2B1")) == ["0"]  # "+1", as Go's ParseInt reads it
    assert _ids(_ok(cs, "scope=foo&limit=1&limit=50")) == ["0"]  # the first value counts
    assert _ok(cs, f"scope=foo&since={last}&block=-1")["changes"] == []


def test_limit_zero_with_block_waits_for_the_next_change(cs: Harness) -> None:
    cs.sql("INSERT INTO items VALUES (1, 'x', 'foo')")
    first = cs.wait_for(1, scope="foo")["lastSequence"]
    with concurrent.futures.ThreadPoolExecutor() as pool:
        waiter = pool.submit(_ok, cs, "scope=foo&limit=0&block=30")
        wait_until(lambda: "foo" in cs.server.state.waiters.by_selector, timeout=30, what="waiter")
        cs.sql("INSERT INTO items VALUES (2, 'y', 'foo')")
        body = waiter.result(timeout=25)  # well before block=30: a wake
    assert body["changes"] == [] and body["lastSequence"] > first


def test_since_before_the_log_began_is_too_old(cs: Harness) -> None:
    # Nothing held: firstSequence is 0.0.0 and no since is too old.
    assert _ok(cs, "scope=foo&since=0.0.5")["firstSequence"] == "0.0.0"

    cs.sql("INSERT INTO items VALUES (1, 'x', 'foo'); INSERT INTO items VALUES (2, 'y', 'foo')")
    body = cs.wait_for(2, scope="foo")
    first = Sequence.parse(body["firstSequence"])
    assert body["firstSequence"] == body["changes"][0]["sequence"]

    # since + 1 < firstSequence (by LSN, then index): nothing purged, and still too old.
    for since in (Sequence(first.lsn - 1, 0), Sequence(first.lsn - 1, 0xFFFF), Sequence(0, 1)):
        too_old = _error(cs, f"scope=foo&since={since}")
        assert too_old["code"] == "SNAPSHOT_TOO_OLD", since
    # The beginning, however spelled, and anything from firstSequence on, are served.
    assert _ids(_ok(cs, "scope=foo&since=0.0.0")) == ["1", "2"]
    assert _ids(_ok(cs, "scope=foo")) == ["1", "2"]
    assert _ids(_ok(cs, f"scope=foo&since={first}")) == ["2"]
    assert _ids(_ok(cs, f"since={first}")) == []
