"""A long-polling consumer starts from a replayed snapshot (``/snapshots``) and continues with
``/changes?since=<its sequence>`` while writes go on: it ends with exactly the database's
rows of its selector, and no change reaches it twice."""

from __future__ import annotations

import random
import threading
from typing import Any

import httpx
import psycopg
import pytest

from changebroker.changeserver.sequence import Sequence
from changebroker.changeserver.snapshots import SEQUENCE_HEADER
from changebroker.replay.job import run_replay
from changebroker.stack.processes import wait_until
from tests.support.bridge_stack import Stack

pytestmark = pytest.mark.spark

TABLES = {
    "public.accounts": ["id"],
    "public.lines": ["order_id", "line"],
}
DDL = [
    "CREATE TABLE accounts (id int PRIMARY KEY, balance numeric(14, 4), note text,"
    " active boolean, seen timestamptz, score double precision, big bigint,"
    " _change_selector text NOT NULL)",
    "CREATE TABLE lines (order_id int, line int, qty int, sku text,"
    " _change_selector text NOT NULL, PRIMARY KEY (order_id, line))",
    "ALTER TABLE accounts REPLICA IDENTITY FULL",
    "ALTER TABLE lines REPLICA IDENTITY FULL",
]
SELECTORS = ("tenant_a", "tenant_b")
WANTED = "tenant_a"
INSERT_ACCOUNT = "INSERT INTO accounts VALUES (%s, %s, %s, %s, now(), %s, %s, %s)"


def _random_account(rng: random.Random, key: int, selector: str) -> tuple[Any, ...]:
    return (
        key,
        f"{rng.randint(-(10**9), 10**9)}.{rng.randint(0, 9999):04d}",
        rng.choice(["", "ünï'code", 'quote " back\\slash', "line\nbreak", None]),
        rng.choice([True, False, None]),
        rng.choice([rng.random() * 1e6, -0.5, 1e-7, None]),
        rng.choice([2**63 - 1, -(2**63), rng.randint(-1000, 1000)]),
        selector,
    )


def _write(dsn: str, rng: random.Random, stop: threading.Event) -> None:
    """Random transactions over both tables and both selectors until ``stop``: inserts,
    updates of every column (never of the selector), deletes, several rows at a time. At
    most a hundred a second: the pipeline runs in this process, and an unpaced writer takes
    its GIL."""
    keys: dict[int, str] = {}
    lines: set[tuple[int, int, str]] = set()
    next_key = 1
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            with conn.transaction():
                for _ in range(rng.randint(1, 5)):
                    choice = rng.random()
                    if choice < 0.45 or not keys:
                        selector = rng.choice(SELECTORS)
                        conn.execute(INSERT_ACCOUNT, _random_account(rng, next_key, selector))
                        keys[next_key] = selector
                        line = (next_key % 7, next_key, selector)
                        conn.execute(
                            "INSERT INTO lines VALUES (%s, %s, %s, %s, %s)",
                            (line[0], line[1], rng.randint(1, 9), f"sku-{next_key}", selector),
                        )
                        lines.add(line)
                        next_key += 1
                    elif choice < 0.8:
                        key = rng.choice(list(keys))
                        values = _random_account(rng, key, keys[key])
                        conn.execute(
                            "UPDATE accounts SET balance = %s, note = %s, active = %s,"
                            " seen = now(), score = %s, big = %s WHERE id = %s",
                            (*values[1:6], key),
                        )
                        if lines:
                            order_id, line_no, _ = rng.choice(sorted(lines))
                            conn.execute(
                                "UPDATE lines SET qty = qty + 1, sku = sku || '+'"
                                " WHERE order_id = %s AND line = %s",
                                (order_id, line_no),
                            )
                    else:
                        key = rng.choice(list(keys))
                        conn.execute("DELETE FROM accounts WHERE id = %s", (key,))
                        del keys[key]
                        if lines:
                            gone = rng.choice(sorted(lines))
                            conn.execute(
                                "DELETE FROM lines WHERE order_id = %s AND line = %s", gone[:2]
                            )
                            lines.discard(gone)
            stop.wait(0.01)


def _database_rows(dsn: str) -> dict[str, dict[tuple[str, ...], dict[str, Any]]]:
    """``SELECT *`` of the wanted selector, as ``/changes`` renders values (text and OID)."""
    out: dict[str, dict[tuple[str, ...], dict[str, Any]]] = {}
    with psycopg.connect(dsn) as conn:
        conn.execute("SET DateStyle = ISO; SET TimeZone = UTC; SET extra_float_digits = 3")
        for table, key in TABLES.items():
            cursor = conn.execute(f"SELECT * FROM {table} LIMIT 0")
            assert cursor.description is not None
            columns = [(d.name, d.type_code) for d in cursor.description]
            select = ", ".join(f'"{name}"::text' for name, _ in columns)
            rows = conn.execute(
                f"SELECT {select} FROM {table} WHERE _change_selector = %s", (WANTED,)
            ).fetchall()
            out[table] = {}
            for row in rows:
                data = {
                    name: {"value": text, "type": oid}
                    for (name, oid), text in zip(columns, row, strict=True)
                }
                out[table][tuple(data[k]["value"] for k in key)] = data
    return out


class Consumer:
    """A long-polling consumer of one selector: loads a snapshot, then applies changes."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.tables: dict[str, dict[tuple[str, ...], dict[str, Any]]] = {t: {} for t in TABLES}
        self.since = ""
        self.sequences: list[Sequence] = []

    def load_snapshot(self) -> Sequence:
        response = httpx.get(f"{self.url}/snapshots", params={"selector": WANTED}, timeout=120)
        assert response.status_code == 200, response.text
        body = response.json()
        assert response.headers[SEQUENCE_HEADER] == body["sequence"]
        for table in body["tables"]:
            for row in table["rows"]:
                key = tuple(row[k]["value"] for k in TABLES[table["name"]])
                self.tables[table["name"]][key] = row
        self.since = body["sequence"]
        return Sequence.parse(self.since)

    def poll(self) -> list[dict[str, Any]]:
        """Every change after ``since`` available now, applied in order."""
        applied: list[dict[str, Any]] = []
        while True:
            params = {"selector": WANTED, "since": self.since, "limit": "500"}
            body = httpx.get(f"{self.url}/changes", params=params, timeout=60).json()
            for change in body["changes"]:
                self.sequences.append(Sequence.parse(change["sequence"]))
                table = self.tables[change["table"]]
                if change["operation"] == 3:  # delete: the old row names the key
                    old = change["oldRow"]
                    table.pop(tuple(old[k]["value"] for k in TABLES[change["table"]]), None)
                else:
                    new = change["newRow"]
                    table[tuple(new[k]["value"] for k in TABLES[change["table"]])] = new
                applied.append(change)
            if not body["changes"]:
                return applied
            self.since = body["changes"][-1]["sequence"]


def _is_last(change: dict[str, Any]) -> bool:
    new = change.get("newRow") or {}  # none for a delete
    return change["table"] == "public.accounts" and new.get("id", {}).get("value") == "1000000"


@pytest.mark.timeout(900)  # a Spark job: minutes on a shared two-core machine
def test_snapshot_then_changes_since_its_sequence_is_the_database(stack: Stack, spark: Any) -> None:
    for statement in DDL:
        stack.sql(statement)
    bridge = stack.start_bridge()
    stop = threading.Event()
    writer = threading.Thread(
        target=_write, args=(stack.app_dsn, random.Random(14), stop), daemon=True
    )
    writer.start()
    try:
        wait_until(
            lambda: sum(p.events for p in bridge.position.progress.values()) >= 200,
            timeout=120,
            what="the bridge to publish 200 events",
        )
        # The replay runs while the writer and the bridge go on.
        manifest = run_replay(stack.replay_options(), spark=spark, say=lambda line: None)
        assert manifest.changeserver_sequence is not None
        consumer = Consumer(stack.changeserver_url)
        boundary = consumer.load_snapshot()
        assert str(boundary) == manifest.changeserver_sequence
        assert sum(len(rows) for rows in consumer.tables.values()) > 0
        consumer.poll()  # catches up while writes go on
    finally:
        stop.set()
        writer.join(timeout=60)
    # A last change after the writer stopped: once it arrives, every change has.
    stack.sql(INSERT_ACCOUNT, (10**6, "1", "last", True, 0.0, 0, WANTED))
    wait_until(
        lambda: any(_is_last(change) for change in consumer.poll()),
        timeout=60,
        what="the last change through /changes",
    )

    expected = _database_rows(stack.app_dsn)
    for table, rows in expected.items():
        got = consumer.tables[table]
        assert got.keys() == rows.keys(), (
            table,
            got.keys() - rows.keys(),
            rows.keys() - got.keys(),
        )
        wrong = {
            key: {c: (got[key].get(c), v) for c, v in row.items() if got[key].get(c) != v}
            for key, row in rows.items()
            if got[key] != row
        }
        assert not wrong, (table, list(wrong.items())[:5])
    assert all(sequence > boundary for sequence in consumer.sequences)
    assert len(set(consumer.sequences)) == len(consumer.sequences)
