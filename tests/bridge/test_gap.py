"""Changes lost upstream (the changeserver's slot dropped and made again): the bridge is
told SNAPSHOT_TOO_OLD, snapshots every table again, and a consumer of its committed events
still ends with every row's newest state, with no eid twice. (A row deleted inside the gap
has no newer state to publish: a snapshot only carries the rows that exist.)"""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from changebroker.chaos.faults import drop_slot_behind
from changebroker.stack.processes import wait_until
from tests.bridge.test_snapshot import s_events
from tests.support.bridge_stack import Stack, rebuilding, snapshot_of

TABLE = "public.accounts"


def test_a_gap_upstream_is_healed_by_a_new_snapshot(
    make_stack: Callable[..., Stack], kafka_bootstrap: str, pg_dsn: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)")
        conn.execute("INSERT INTO accounts SELECT i, 0 FROM generate_series(1, 100) i")
    stack = make_stack(kafka_bootstrap, on_slot_loss="recreate")
    with rebuilding(stack) as rebuilt:
        stack.start_bridge(include=(TABLE,))
        wait_until(
            lambda: snapshot_of(stack, TABLE).get("state") == "done", timeout=60, what="snapshot"
        )
        first = snapshot_of(stack, TABLE)["id"]
        stack.sql("UPDATE accounts SET balance = 1 WHERE id <= 10")
        wait_until(lambda: rebuilt.equals_database([TABLE]), timeout=60, what="the first rows")

        # Writes right after the drop, while no slot exists: they are in no change log.
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            drop_slot_behind(pg_dsn, stack.publication)
            conn.execute("UPDATE accounts SET balance = 2 WHERE id > 90")
            conn.execute("INSERT INTO accounts VALUES (102, 2)")
        wait_until(
            lambda: (
                snapshot_of(stack, TABLE).get("id") != first
                and snapshot_of(stack, TABLE).get("state") == "done"
            ),
            timeout=60,
            what="a new snapshot after the gap",
        )
        stack.sql("INSERT INTO accounts VALUES (101, 3)")
        wait_until(lambda: rebuilt.equals_database([TABLE]), timeout=60, what="the rebuilt table")
        assert rebuilt.duplicate_eids() == []
        second = snapshot_of(stack, TABLE)["id"]
        runs = {e["metadata"]["flow_id"] for e in s_events(rebuilt)}
        assert runs == {f"snapshot:{first}", f"snapshot:{second}"}
