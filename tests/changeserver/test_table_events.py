"""TRUNCATE and DDL in the change stream: the ``table`` extension serves them as table events
at their place among the changes; transicator's readers of a selector whose rows they may
have removed or redefined are told SNAPSHOT_TOO_OLD, long polls included."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import psycopg

from changebroker.changeserver.ddl import CREATE, DROP, REDEFINE, TRUNCATE
from changebroker.stack.processes import wait_until
from tests.support.changeserver import Harness

INSERT, UPDATE = 1, 2


def _table_reads(cs: Harness, since: str = "0.0.0") -> list[dict[str, Any]]:
    """Every change held after ``since`` of the test's tables (not the product's own)."""
    response = cs.get(table=["public.items", "public.plain*", "public.child"], since=since)
    assert response.status_code == 200, response.text
    changes: list[dict[str, Any]] = response.json()["changes"]
    return changes


def _served(cs: Harness, count: int) -> list[tuple[str, int, str | None]]:
    found: list[tuple[str, int, str | None]] = []

    def enough() -> bool:
        found[:] = [(c["table"], c["operation"], c.get("detail")) for c in _table_reads(cs)]
        return len(found) >= count

    wait_until(enough, timeout=30, what=f"{count} changes and table events")
    return found


def _too_old(response: Any) -> bool:
    return response.status_code == 400 and response.json()["code"] == "SNAPSHOT_TOO_OLD"


def test_truncates_of_several_tables_and_cascades_are_table_events_in_place(cs: Harness) -> None:
    cs.sql("CREATE TABLE plain (id int PRIMARY KEY)")
    cs.sql("CREATE TABLE child (id int PRIMARY KEY, plain int REFERENCES plain)")
    cs.sql("INSERT INTO items VALUES (1, 'one', 'a'); INSERT INTO plain VALUES (1)")
    cs.sql(
        "BEGIN; INSERT INTO child VALUES (1, 1); TRUNCATE items, plain CASCADE;"
        " INSERT INTO plain VALUES (2); COMMIT"
    )
    cs.sql("TRUNCATE plain RESTART IDENTITY CASCADE")
    served = _served(cs, 11)
    assert served == [
        ("public.plain", CREATE, "CREATE TABLE"),
        ("public.child", CREATE, "CREATE TABLE"),
        ("public.items", INSERT, None),
        ("public.plain", INSERT, None),
        ("public.child", INSERT, None),
        # One statement, three tables (child by CASCADE), then the insert after it.
        ("public.items", TRUNCATE, "truncated"),
        ("public.plain", TRUNCATE, "truncated"),
        ("public.child", TRUNCATE, "truncated"),
        ("public.plain", INSERT, None),
        ("public.plain", TRUNCATE, "truncated"),
        ("public.child", TRUNCATE, "truncated"),
    ]


def test_ddl_that_changes_what_rows_mean_is_a_table_event_and_the_rest_is_not(
    cs: Harness,
) -> None:
    cs.sql("CREATE TABLE plain (id int PRIMARY KEY, v text, n int)")
    cs.sql("INSERT INTO plain VALUES (1, 'x', 1)")
    statements = [
        "ALTER TABLE plain RENAME COLUMN v TO w",
        "ALTER TABLE plain ADD COLUMN d text DEFAULT 'q'",
        "ALTER TABLE plain ADD COLUMN e text",  # existing rows read NULL, as their changes say
        "ALTER TABLE plain ALTER COLUMN e SET DEFAULT 'r'",
        "ALTER TABLE plain ALTER COLUMN n SET NOT NULL",
        "CREATE INDEX ON plain (n)",
        "ALTER TABLE plain ALTER COLUMN n TYPE text USING (n * 10)::text",
        "ALTER TABLE plain DROP COLUMN d",
        "BEGIN; DROP TABLE plain; CREATE TABLE plain (id int PRIMARY KEY);"
        " INSERT INTO plain VALUES (5); COMMIT",
        "ALTER TABLE plain RENAME TO plain2",
    ]
    for statement in statements:
        cs.sql(statement)
    served = [s for s in _served(cs, 10) if s[1] != INSERT]
    assert served == [
        ("public.plain", CREATE, "CREATE TABLE"),
        ("public.plain", REDEFINE, "column v renamed to w"),
        ("public.plain", REDEFINE, "column d added with a value for existing rows"),
        ("public.plain", REDEFINE, "column n retyped; rows rewritten (a type changed, or a"
         " volatile default filled)"),
        ("public.plain", REDEFINE, "column d dropped"),
        ("public.plain", DROP, "dropped"),
        ("public.plain", CREATE, "CREATE TABLE"),
        ("public.plain", DROP, "renamed to public.plain2"),
        ("public.plain2", REDEFINE, "renamed from public.plain"),
    ]  # fmt: skip
    # Dropped and created in one transaction: the new table's insert comes after both.
    kinds = [(c["table"], c["operation"]) for c in _table_reads(cs)]
    assert kinds[-5:-2] == [("public.plain", DROP), ("public.plain", CREATE), ("public.plain", 1)]


def test_a_long_poll_of_a_selector_hears_of_a_truncate_as_snapshot_too_old(cs: Harness) -> None:
    cs.sql("INSERT INTO items VALUES (1, 'one', 'a')")
    last = cs.wait_for(1, scope="a")["lastSequence"]
    with concurrent.futures.ThreadPoolExecutor() as pool:
        waiter = pool.submit(cs.get, scope="a", since=last, block=120)
        wait_until(lambda: "a" in cs.server.state.waiters.by_selector, timeout=30, what="a poll")
        cs.sql("TRUNCATE items")
        # Well before block=120 runs out: the wake answered it.
        response = waiter.result(timeout=60)
    assert _too_old(response), response.text
    assert "public.items truncated" in response.json()["error"]
    # A position after the truncate (a snapshot taken since) reads on.
    cs.sql("INSERT INTO items VALUES (2, 'two', 'a')")
    wait_until(lambda: len(_table_reads(cs, last)) >= 2, timeout=30, what="the insert")
    truncate = _table_reads(cs, last)[0]
    assert truncate["operation"] == TRUNCATE
    body = cs.changes(scope="a", since=truncate["sequence"])
    assert [c["newRow"]["id"]["value"] for c in body["changes"]] == ["2"]
    # From the beginning the log is all a reader asks for: never too old (transicator's rule).
    assert cs.get(scope="a").status_code == 200


def test_a_snapshot_that_saw_the_truncate_reads_on_one_that_did_not_is_too_old(
    cs: Harness,
) -> None:
    with psycopg.connect(cs.dsn, autocommit=True) as conn:
        (before,) = conn.execute("SELECT txid_current_snapshot()::text").fetchone() or ("",)
        conn.execute("INSERT INTO items VALUES (1, 'one', 'a')")
        conn.execute("TRUNCATE items")
        conn.execute("INSERT INTO items VALUES (2, 'two', 'a')")
        (after,) = conn.execute("SELECT txid_current_snapshot()::text").fetchone() or ("",)
    wait_until(lambda: len(_table_reads(cs)) >= 3, timeout=30, what="the changes")
    assert _too_old(cs.get(scope="a", snapshot=before))
    assert cs.changes(scope="a", snapshot=after)["changes"] == []


def test_a_table_without_the_selector_column_concerns_only_readers_of_no_selector(
    cs: Harness,
) -> None:
    cs.sql("CREATE TABLE plain (id int PRIMARY KEY)")
    cs.sql("INSERT INTO items VALUES (1, 'one', 'a')")
    last = cs.wait_for(1, scope="a")["lastSequence"]
    cs.sql("TRUNCATE plain")
    cs.sql("INSERT INTO items VALUES (2, 'two', 'a')")
    cs.wait_for(1, scope="a", since=last)
    # Its rows are all under no selector: a reader of "a" held none of them.
    assert cs.changes(scope="a", since=last)["changes"][0]["newRow"]["id"]["value"] == "2"
    assert _too_old(cs.get(since=last))


def test_ddl_of_a_selector_table_tells_its_readers(cs: Harness) -> None:
    cs.sql("INSERT INTO items VALUES (1, 'one', 'a')")
    last = cs.wait_for(1, scope="a")["lastSequence"]
    cs.sql("ALTER TABLE items ALTER COLUMN name SET DEFAULT 'none'")  # harmless
    cs.sql("INSERT INTO items VALUES (2, 'two', 'a')")
    cs.wait_for(1, scope="a", since=last)
    cs.sql("ALTER TABLE items RENAME COLUMN name TO label")
    wait_until(lambda: _too_old(cs.get(scope="b", since=last)), timeout=30, what="a reset")
    assert "column name renamed to label" in cs.get(scope="a", since=last).json()["error"]
