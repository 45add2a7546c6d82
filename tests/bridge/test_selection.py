"""Tables by name: ``--include``/``--exclude`` globs decide which tables get event types, a
selector column plays no part, and a table without a primary key is refused (log, /health,
/status) unless ``--key`` names its key columns."""

from __future__ import annotations

import httpx
import psycopg

from changebroker.stack.processes import wait_until
from tests.support.bridge_stack import Rebuilt, Stack

TABLES = """
CREATE SCHEMA sales;
CREATE TABLE sales.orders (id int PRIMARY KEY, total numeric);
CREATE TABLE sales.secret (id int PRIMARY KEY, note text);
CREATE TABLE public.keep_a (id int PRIMARY KEY, v text, _change_selector text DEFAULT 'other');
CREATE TABLE public.keep_b (id int PRIMARY KEY, v text);
CREATE TABLE public.skip (id int PRIMARY KEY, v text);
CREATE TABLE public.keep_nokey (a int, b int, v text);
CREATE TABLE public.keep_keyed (a int NOT NULL, b int NOT NULL, v text);
ALTER TABLE public.keep_nokey REPLICA IDENTITY FULL;
ALTER TABLE public.keep_keyed REPLICA IDENTITY FULL;
INSERT INTO sales.orders VALUES (1, 10), (2, 20);
INSERT INTO sales.secret VALUES (1, 'x');
INSERT INTO public.keep_a VALUES (1, 'a');
INSERT INTO public.skip VALUES (1, 's');
INSERT INTO public.keep_nokey VALUES (1, 1, 'n');
INSERT INTO public.keep_keyed VALUES (1, 1, 'k'), (1, 2, 'k');
"""


def event_types(stack: Stack) -> set[str]:
    with psycopg.connect(stack.meta_dsn) as conn:
        rows = conn.execute(
            "SELECT name FROM broker_event_types WHERE name LIKE %s", (stack.prefix + ".%",)
        ).fetchall()
    return {r[0].removeprefix(stack.prefix + ".") for r in rows}


def test_only_the_named_tables_get_event_types(stack: Stack, rebuilt: Rebuilt) -> None:
    stack.sql(TABLES)
    stack.start_bridge(
        include=("sales.*", "public.keep_*"),
        exclude=("sales.secret",),
        keys={"public.keep_keyed": ("a", "b")},
    )
    # Live changes too, whatever the selector column holds (keep_a's says 'other').
    stack.sql("INSERT INTO public.keep_b VALUES (1, 'b'); UPDATE public.keep_a SET v = 'A'")
    stack.sql("INSERT INTO public.skip VALUES (2, 's'); INSERT INTO sales.secret VALUES (2, 'y')")
    stack.sql("DELETE FROM public.keep_keyed WHERE b = 2; INSERT INTO sales.orders VALUES (3, 30)")
    published = ["sales.orders", "public.keep_a", "public.keep_b", "public.keep_keyed"]
    keyed = "public.keep_keyed"
    wait_until(lambda: rebuilt.equals_database(published[:3]), timeout=60, what="rebuilt tables")
    # No primary key: the rebuilt table is keyed by the --key columns.
    assert rebuilt.tables[keyed] == {(1, 1): {"a": 1, "b": 1, "v": "k"}}
    assert event_types(stack) == set(published)
    assert rebuilt.duplicate_eids() == []

    reason = "public.keep_nokey has no primary key"
    health = httpx.get(f"{stack.bridge_url}/health", timeout=10).json()
    assert health["status"] == "DEGRADED"
    assert health["refused"]["public.keep_nokey"].startswith(reason)
    assert "--key public.keep_nokey=" in health["refused"]["public.keep_nokey"]
    unit = stack.status()["units"]["public.keep_nokey"]
    assert unit["refused"].startswith(reason) and unit["snapshot"] is None
    # Created after the changeserver began: every row came through the stream, none was
    # read by a snapshot.
    run = stack.status()["units"][keyed]["snapshot"]
    assert run["state"] == "done" and run["rows_read"] == 0 and run["created"]
    metrics = httpx.get(f"{stack.bridge_url}/metrics", timeout=10).text
    assert stack.status()["units"]["sales.orders"]["snapshot"]["created"]
    assert 'changebroker_bridge_snapshot_rows_read{unit="sales.orders"} 0' in metrics
    assert 'changebroker_bridge_snapshot_running{unit="sales.orders"} 0' in metrics
