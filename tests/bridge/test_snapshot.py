"""Snapshots: a table's existing rows as ``S`` events, consistent with the live changes while
writers keep updating, inserting and deleting; resumed after SIGKILLs; again on request.

The table has no selector column, a composite primary key and REPLICA IDENTITY DEFAULT
(deletes carry the key alone). A consumer applying S, C, U, D ends equal to ``SELECT *``,
and no eid is committed twice.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import psycopg
import pytest

from changebroker import cli
from changebroker.bridge import snapshot_runs
from changebroker.stack.processes import wait_until
from tests.broker.subscription_support import commit, create
from tests.support.bridge_stack import Rebuilt, Stack, rebuilding, snapshot_of

ROWS = 200_000
TABLE = "public.big"
BIG = """
CREATE TABLE big (a int, b int, v text NOT NULL, amount numeric, at timestamptz,
    PRIMARY KEY (a, b));
INSERT INTO big SELECT i / 10, i % 10, repeat('x', 40) || i, i * 1.5, now()
    FROM generate_series(0, {rows} - 1) i;
ANALYZE big;
"""


class Writers:
    """``count`` threads, each on its own connection, committing one update, insert or
    delete at a time until stopped."""

    def __init__(self, dsn: str, rows: int, count: int = 4) -> None:
        self.dsn, self.rows = dsn, rows
        self.done = [0] * count
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(count)]

    def ops(self) -> int:
        return sum(self.done)

    def wait_for(self, more: int, what: str) -> None:
        """Until ``more`` writes have been committed from now."""
        start = self.ops()
        wait_until(lambda: self.ops() > start + more, timeout=30, what=what)

    def start(self) -> Writers:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _run(self, index: int) -> None:
        rng = random.Random(index)
        fresh = 0
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.is_set():
                a, b = rng.randrange(self.rows // 10), rng.randrange(10)
                roll = rng.random()
                if roll < 0.5:
                    conn.execute(
                        "UPDATE big SET v = v || 'u', amount = amount + 1, at = now()"
                        " WHERE a = %s AND b = %s",
                        (a, b),
                    )
                elif roll < 0.75:
                    fresh += 1
                    conn.execute(
                        "INSERT INTO big VALUES (%s, %s, 'new', NULL, now())",
                        (-1 - index, fresh),
                    )
                elif roll < 0.9:
                    conn.execute("DELETE FROM big WHERE a = %s AND b = %s", (a, b))
                else:
                    # A key change: the row moves to a key no one else writes.
                    conn.execute(
                        "UPDATE big SET a = a + 1000000 WHERE a = %s AND b = %s AND a < 1000000",
                        (a, b),
                    )
                self.done[index] += 1


def s_events(rebuilt: Rebuilt) -> list[dict[str, Any]]:
    return [e for e in rebuilt.events if e.get("data_op") == "S"]


def through_subscription(stack: Stack, count: int) -> Rebuilt:
    """``count`` events read through a subscription of the broker's API (cursors committed)
    and applied to tables of their own."""
    out = Rebuilt(stack)
    with httpx.Client(base_url=stack.broker_url, timeout=60) as client:
        name = stack.event_type(TABLE)
        keys = sorted(client.get(f"/event-types/{name}").json()["partition_key_fields"])
        subscription = create(client, [name], read_from="begin")
        with client.stream(
            "GET",
            f"/subscriptions/{subscription['id']}/events",
            params={
                "batch_limit": 5000,
                "batch_flush_timeout": 1,
                "max_uncommitted_events": 50_000,
            },
        ) as response:
            assert response.status_code == 200
            stream_id = response.headers["X-Nakadi-StreamId"]
            for line in response.iter_lines():
                batch = json.loads(line) if line else {}
                for event in batch.get("events", []):
                    out.apply(event, keys, batch["cursor"]["partition"])
                if batch.get("events"):
                    answer = commit(client, subscription["id"], stream_id, [batch["cursor"]])
                    assert answer.status_code in (200, 204), answer.text
                if len(out.events) >= count:
                    break
    return out


def existing(
    make_stack: Callable[[str], Stack], kafka_bootstrap: str, pg_dsn: str, rows: int
) -> Stack:
    """A stack whose changeserver starts after the table was filled: its rows exist, their
    inserts are not in the change log."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(BIG.format(rows=rows))
    return make_stack(kafka_bootstrap)


@pytest.fixture
def filled(
    make_stack: Callable[[str], Stack], kafka_bootstrap: str, pg_dsn: str
) -> Iterator[tuple[Stack, Rebuilt]]:
    """:func:`existing` with ``ROWS`` rows, and the tables rebuilt from its events."""
    stack = existing(make_stack, kafka_bootstrap, pg_dsn, ROWS)
    with rebuilding(stack) as rebuilt:
        yield stack, rebuilt


def test_initial_snapshot_while_four_writers_write(filled: tuple[Stack, Rebuilt]) -> None:
    stack, rebuilt = filled
    writers = Writers(stack.app_dsn, ROWS).start()
    try:
        writers.wait_for(200, "the writers to write")
        stack.start_bridge(include=(TABLE,))
        wait_until(
            lambda: snapshot_of(stack, TABLE).get("state") == "done",
            timeout=240,
            what="the snapshot to finish",
        )
        writers.wait_for(200, "writes after it")
    finally:
        writers.stop()
    run = snapshot_of(stack, TABLE)
    assert run["rows_read"] >= ROWS - writers.ops()
    wait_until(lambda: rebuilt.equals_database([TABLE]), timeout=120, what="the rebuilt table")
    assert rebuilt.duplicate_eids() == []
    snapshot = s_events(rebuilt)
    assert 0 < len(snapshot) <= run["rows_read"]
    assert {e["metadata"]["flow_id"] for e in snapshot} == {f"snapshot:{run['id']}"}
    # REPLICA IDENTITY DEFAULT: a delete carries its key, and only that.
    deletes = [e for e in rebuilt.events if e.get("data_op") == "D"]
    assert deletes and all(set(e["data"]) == {"a", "b"} for e in deletes)

    # A subscription of the broker's API serves the same events: the same table.
    via_api = through_subscription(stack, len(rebuilt.events))
    assert via_api.tables[TABLE] == rebuilt.tables[TABLE]
    assert via_api.duplicate_eids() == []


def test_sigkilled_twice_the_snapshot_resumes(filled: tuple[Stack, Rebuilt]) -> None:
    stack, rebuilt = filled
    bridge = stack.bridge_process("--include", TABLE, "--snapshot-chunk", "10000")
    writers = Writers(stack.app_dsn, ROWS).start()
    try:
        bridge.start()
        for share in (0.2, 0.5):
            wait_until(
                lambda share=share: snapshot_of(stack, TABLE).get("rows_read", 0) > ROWS * share,  # type: ignore[misc]
                timeout=120,
                what=f"{share:.0%} of the snapshot",
            )
            assert snapshot_of(stack, TABLE)["state"] == "running"
            bridge.kill()
            bridge.start()
        resumed_at = snapshot_of(stack, TABLE)["rows_read"]
        assert resumed_at > ROWS * 0.5
        wait_until(
            lambda: snapshot_of(stack, TABLE).get("state") == "done",
            timeout=240,
            what="the snapshot to finish",
        )
    finally:
        writers.stop()
    run = snapshot_of(stack, TABLE)
    # Resumed, not started over: this process read only what the killed ones had not committed.
    assert run["rows_read_by_this_process"] < ROWS * 0.6
    assert run["rows_read"] >= ROWS - writers.ops()
    wait_until(lambda: rebuilt.equals_database([TABLE]), timeout=120, what="the rebuilt table")
    assert rebuilt.duplicate_eids() == []
    assert {e["metadata"]["flow_id"] for e in s_events(rebuilt)} == {f"snapshot:{run['id']}"}
    bridge.stop()


def test_snapshot_again_on_request_while_writers_write(
    make_stack: Callable[[str], Stack], kafka_bootstrap: str, pg_dsn: str
) -> None:
    rows = 20_000
    stack = existing(make_stack, kafka_bootstrap, pg_dsn, rows)
    with rebuilding(stack) as rebuilt:
        snapshot_again_on_request_while_writers_write(stack, rebuilt, rows)


def snapshot_again_on_request_while_writers_write(
    stack: Stack, rebuilt: Rebuilt, rows: int
) -> None:
    stack.start_bridge(include=(TABLE,))
    wait_until(
        lambda: snapshot_of(stack, TABLE).get("state") == "done", timeout=60, what="the first"
    )
    first = snapshot_of(stack, TABLE)["id"]
    writers = Writers(stack.app_dsn, rows).start()
    try:
        port = stack.bridge_url.rsplit(":", 1)[1]
        assert cli.main(["bridge", "--port", port, "snapshot", TABLE]) == 0
        wait_until(
            lambda: (
                snapshot_of(stack, TABLE)["id"] != first
                and snapshot_of(stack, TABLE)["state"] == "done"
            ),
            timeout=60,
            what="the second snapshot",
        )
        writers.wait_for(100, "writes after it")
    finally:
        writers.stop()
    second = snapshot_of(stack, TABLE)["id"]
    wait_until(lambda: rebuilt.equals_database([TABLE]), timeout=60, what="the rebuilt table")
    assert rebuilt.duplicate_eids() == []
    runs = {e["metadata"]["flow_id"] for e in s_events(rebuilt)}
    assert runs == {f"snapshot:{first}", f"snapshot:{second}"}

    # A table the bridge does not publish is refused by name.
    missing = httpx.post(f"{stack.bridge_url}/units/public.nothing/snapshot", timeout=10)
    assert missing.status_code == 404


def test_a_table_created_later_is_snapshotted_at_its_first_change(
    stack: Stack, rebuilt: Rebuilt, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table created while the bridge runs gets its first run as soon as its first change
    arrives, not at the next look at the publication (made rare here, so only the change can
    start it): the run finds the one row committed by then, and the rows inserted after it
    reach consumers once, as ``C`` events, not again as ``S``."""
    monkeypatch.setattr(snapshot_runs, "DISCOVER_EVERY", 3600.0)
    stack.start_bridge()
    stack.sql("CREATE TABLE late (id int PRIMARY KEY, v text)")
    stack.sql("INSERT INTO late VALUES (1, 'first')")
    wait_until(
        lambda: snapshot_of(stack, "public.late").get("state") == "done",
        timeout=60,
        what="the new table's first run",
    )
    stack.sql("INSERT INTO late SELECT i, 'later' FROM generate_series(2, 100) i")
    wait_until(lambda: rebuilt.equals_database(["public.late"]), timeout=60, what="rebuilt")
    assert [e["data"]["id"] for e in s_events(rebuilt)] in ([], [1])
    assert snapshot_of(stack, "public.late")["rows_read"] <= 1
    assert rebuilt.duplicate_eids() == []
