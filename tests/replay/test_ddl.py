"""History equal to the table through TRUNCATE, DROP TABLE and CREATE again, and ALTER TABLE
that redefines rows, for every reader at once, with writers before, during and after the DDL:

* the replay, full and incremental from a snapshot taken before the DDL, equals ``SELECT *``
  (rows and columns);
* a subscription consumer starting from that snapshot and applying the bridge README's
  rules equals it;
* a transicator long-poller of a selector, caught up from that snapshot, is told
  SNAPSHOT_TOO_OLD, and after a snapshot again equals the selector's rows;
* no eid is committed twice.

Postgres -> changeserver -> bridge -> broker -> Kafka -> Spark, nothing mocked.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from pyspark.sql import SparkSession

from changebroker.changeserver.sequence import Sequence
from changebroker.changeserver.snapshots import SEQUENCE_HEADER
from changebroker.client.sync import create_snapshot_subscription
from changebroker.replay import run_replay
from changebroker.replay.snapshots import Manifest
from changebroker.stack.processes import wait_until
from tests.broker.subscription_support import Stream, commit
from tests.support.bridge_stack import Rebuilt, Stack, rebuilding, table_rows
from tests.support.replay_snapshots import Rows, snapshot_tables

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

WANTED = "wanted"
KEYS = 300  # ids the writers use: inserts, updates and deletes meet


def _table(name: str, extra: str = "") -> str:
    return (
        f"CREATE TABLE {name} (id int PRIMARY KEY, n int, note text{extra},"
        f" _change_selector text NOT NULL DEFAULT '{WANTED}');"
        f" ALTER TABLE {name} REPLICA IDENTITY FULL;"
    )


def _filled(name: str, rows: int) -> str:
    return (
        f"INSERT INTO {name} (id, n, note, _change_selector) SELECT i, i, 'first ' || i,"
        f" CASE WHEN i % 2 = 0 THEN '{WANTED}' ELSE 'other' END"
        f" FROM generate_series(1, {rows}) i;"
    )


CREATE_AGAIN = "create the table again, once consumers hold none of its rows"


@dataclass(frozen=True)
class Case:
    tables: tuple[str, ...]
    setup: str  # before the changeserver starts: the bridge snapshots these rows
    ddl: tuple[str, ...]  # each statement in its own transaction, writers running
    # The DDL runs while a snapshot of the first table (asked for, in chunks of 50) runs.
    during_snapshot: bool = False


ONE = _table("a") + _filled("a", 200)
TWO = _table("a") + _table("b") + _filled("a", 200) + _filled("b", 200)
LINKED = (
    _table("a")
    + _table("b", ", parent int REFERENCES a ON DELETE CASCADE")
    + _filled("a", 200)
    + _filled("b", 200)
    + "UPDATE b SET parent = id;"
)
AGAIN = f"BEGIN; DROP TABLE a; {_table('a')} INSERT INTO a VALUES (1, 1, 'new'); COMMIT"
CASES = {
    "truncate two tables in one statement": Case(("public.a", "public.b"), TWO, ("TRUNCATE a, b",)),
    "truncate cascade": Case(
        ("public.a", "public.b"), LINKED, ("TRUNCATE a RESTART IDENTITY CASCADE",)
    ),
    "drop, then create again": Case(("public.a",), ONE, ("DROP TABLE a", CREATE_AGAIN)),
    "drop and create again in one transaction": Case(("public.a",), ONE, (AGAIN,)),
    "rename column": Case(("public.a",), ONE, ("ALTER TABLE a RENAME COLUMN note TO memo",)),
    "add column with a default": Case(
        ("public.a",), ONE, ("ALTER TABLE a ADD COLUMN tag text DEFAULT 'x'",)
    ),
    "alter type using, while a snapshot runs": Case(
        ("public.a",),
        _table("a") + _filled("a", 10_000),
        ("ALTER TABLE a ALTER COLUMN n TYPE bigint USING n * 10",),
        during_snapshot=True,
    ),
}


class Writers:
    """Threads writing random transactions to the case's tables until stopped: inserts,
    updates, deletes, in both selectors. A statement the DDL breaks (a table gone, a column
    renamed) is rolled back and the tables' text columns are read again.

    Each thread writes at most ``PACE`` transactions a second: unpaced, the writers share
    this process (and its GIL) with the whole pipeline and outrun it, so how long the
    pipeline takes to catch up grows with how long the test has run."""

    PACE = 50

    def __init__(self, dsn: str, tables: tuple[str, ...], count: int = 2) -> None:
        self.dsn, self.tables = dsn, tables
        self.committed = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(count)]

    def start(self) -> Writers:
        for thread in self._threads:
            thread.start()
        return self

    def wait_for(self, more: int) -> None:
        start = self.committed
        wait_until(lambda: self.committed >= start + more, timeout=60, what=f"{more} writes")

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _text_columns(self, conn: psycopg.Connection) -> dict[str, list[str]]:
        found = {}
        for table in self.tables:
            found[table] = [
                name
                for (name,) in conn.execute(
                    "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s)"
                    " AND attnum > 0 AND NOT attisdropped AND atttypid = 'text'::regtype"
                    " AND attname <> '_change_selector'",
                    (table,),
                ).fetchall()
            ]
        return found

    def _run(self, index: int) -> None:
        rng = random.Random(index)
        with psycopg.connect(self.dsn) as conn:
            columns = self._text_columns(conn)
            conn.commit()
            while not self._stop.is_set():
                try:
                    for _ in range(rng.randint(1, 3)):
                        self._one(conn, rng, columns)
                    conn.commit()
                    self.committed += 1
                    self._stop.wait(1 / self.PACE)
                except psycopg.Error:
                    conn.rollback()
                    time.sleep(0.05)
                    columns = self._text_columns(conn)
                    conn.commit()

    def _one(
        self, conn: psycopg.Connection, rng: random.Random, columns: dict[str, list[str]]
    ) -> None:
        table = rng.choice(self.tables)
        text = rng.choice(columns[table]) if columns[table] else None
        key, roll = rng.randint(1, KEYS), rng.random()
        selector = rng.choice([WANTED, "other"])
        value = f"w{rng.randint(0, 10**6)}"
        if roll < 0.5:
            names = ["id", "n", "_change_selector", *([text] if text else [])]
            values = [key, rng.randint(0, 1000), selector, *([value] if text else [])]
            sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in names[1:])
            marks = ", ".join(["%s"] * len(names))
            conn.execute(
                f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks})"
                f" ON CONFLICT (id) DO UPDATE SET {sets}",
                values,
            )
        elif roll < 0.8:
            change = f", {text} = %s" if text else ""
            conn.execute(
                f"UPDATE {table} SET n = n + 1{change} WHERE id = %s",
                [*([value] if text else []), key],
            )
        else:
            conn.execute(f"DELETE FROM {table} WHERE id = %s", (key,))


def _database(stack: Stack, tables: tuple[str, ...]) -> dict[str, Rows]:
    """``SELECT *`` of each table as the events render values; a dropped table has no rows."""
    with psycopg.connect(stack.app_dsn) as conn:
        present = {t for t in tables if conn.execute("SELECT to_regclass(%s)", (t,)).fetchone()[0]}  # type: ignore[index]
    return {t: table_rows(stack.app_dsn, t) if t in present else {} for t in tables}


def _rebuilt(rebuilt: Rebuilt) -> dict[str, Rows]:
    rebuilt.drain()
    return rebuilt.tables


def _differences(got: dict[str, Rows], expected: dict[str, Rows], exact: bool) -> list[str]:
    """Rows missing, extra or different; ``exact``: a row may hold no column the table lacks."""
    found = []
    for table, rows in expected.items():
        have = got.get(table, {})
        if have.keys() != rows.keys():
            missing, extra = rows.keys() - have.keys(), have.keys() - rows.keys()
            found.append(f"{table}: missing {sorted(missing)[:5]}, extra {sorted(extra)[:5]}")
            continue
        for key, row in rows.items():
            seen = have[key] if exact else {c: have[key].get(c) for c in row}
            if seen != row:
                found.append(f"{table} {key}: {seen} != {row}")
    return found[:10]


@dataclass
class Poller:
    """A transicator client of one selector: a snapshot from ``/snapshots``, then
    ``/changes?since=`` its sequence, long-polling; told SNAPSHOT_TOO_OLD, it stops."""

    url: str
    tables: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    since: str = ""
    told: str = ""  # the SNAPSHOT_TOO_OLD it was given
    _thread: threading.Thread | None = None

    def load(self) -> None:
        response = httpx.get(f"{self.url}/snapshots", params={"selector": WANTED}, timeout=120)
        assert response.status_code == 200, response.text
        body = response.json()
        self.tables = {
            t["name"]: {row["id"]["value"]: row for row in t["rows"]} for t in body["tables"]
        }
        self.since, self.told = response.headers[SEQUENCE_HEADER], ""

    def poll(self, block: int = 0) -> bool:
        """One read; False when there was nothing (or it was told to snapshot again)."""
        params: dict[str, str | int] = {
            "selector": WANTED,
            "since": self.since,
            "limit": 500,
            "block": block,
        }
        response = httpx.get(f"{self.url}/changes", params=params, timeout=block + 60)
        if response.status_code == 400 and response.json()["code"] == "SNAPSHOT_TOO_OLD":
            self.told = response.json()["error"]
            return False
        assert response.status_code == 200, response.text
        changes = response.json()["changes"]
        for change in changes:
            table = self.tables.setdefault(change["table"], {})
            if change["operation"] == 3:
                table.pop(change["oldRow"]["id"]["value"], None)
            else:
                table[change["newRow"]["id"]["value"]] = change["newRow"]
        if changes:
            self.since = changes[-1]["sequence"]
        return bool(changes)

    def follow(self, stop: threading.Event) -> None:
        """Long-poll on a thread until told (or ``stop``)."""

        def run() -> None:
            while not self.told and not stop.is_set():
                self.poll(block=2)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def joined(self) -> bool:
        assert self._thread is not None
        self._thread.join(timeout=0)
        return not self._thread.is_alive()

    def rows(self) -> dict[str, dict[str, dict[str, Any]]]:
        return {t: rows for t, rows in self.tables.items() if rows}


def _selector_rows(stack: Stack, tables: tuple[str, ...]) -> dict[str, dict[str, dict[str, Any]]]:
    """The selector's rows as ``/changes`` renders them: text and type OID."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    with psycopg.connect(stack.app_dsn) as conn:
        conn.execute("SET DateStyle = ISO; SET TimeZone = UTC; SET extra_float_digits = 3")
        for table in tables:
            if not conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0]:  # type: ignore[index]
                continue
            cursor = conn.execute(f"SELECT * FROM {table} LIMIT 0")
            assert cursor.description is not None
            columns = [(d.name, d.type_code) for d in cursor.description]
            select = ", ".join(f'"{name}"::text' for name, _ in columns)
            rows = conn.execute(
                f"SELECT {select} FROM {table} WHERE _change_selector = %s", (WANTED,)
            ).fetchall()
            if rows:
                out[table] = {
                    row[0]: {
                        n: {"value": v, "type": oid}
                        for (n, oid), v in zip(columns, row, strict=True)
                    }
                    for row in rows
                }
    return out


class Subscriber:
    """A subscription from a snapshot's cursors, consumed on a thread of its own (each batch
    applied onto the snapshot's rows and committed as it comes) until closed."""

    def __init__(self, stack: Stack, manifest: Manifest, loaded: dict[str, Rows]) -> None:
        self.consumer = Rebuilt(stack)
        for table, rows in loaded.items():
            self.consumer.load(table, rows)
        self.keys = {e.event_type: sorted(e.primary_key) for e in manifest.tables.values()}
        self.id = create_snapshot_subscription(stack.broker_url, manifest.as_json(), "ddl-test")
        self.client = httpx.Client(base_url=stack.broker_url, timeout=60)
        self.stream = Stream(self.client, self.id, batch_flush_timeout=1, batch_limit=200)
        self.failure: BaseException | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._consume, daemon=True)
        self._thread.start()

    def _consume(self) -> None:
        try:
            while not self._stop.is_set():
                batch = self.stream.batch()
                assert batch is not None, "the subscription stream ended"
                events = batch.get("events") or []
                cursor = batch["cursor"]
                with self._lock:
                    for event in events:
                        keys = self.keys[cursor["event_type"]]
                        self.consumer.apply(event, keys, cursor["partition"])
                if events:
                    answer = commit(self.client, self.id, self.stream.id, [cursor])
                    assert answer.status_code in (200, 204), answer.text
        except BaseException as failure:  # reported by tables()
            self.failure = failure

    def tables(self) -> dict[str, Rows]:
        """The consumer's tables as they are now."""
        assert self.failure is None, self.failure
        with self._lock:
            return {table: dict(rows) for table, rows in self.consumer.tables.items()}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.stream.close()
        self.client.close()


@pytest.fixture
def case_stack(
    request: pytest.FixtureRequest,
    make_stack: Callable[[str], Stack],
    kafka_bootstrap: str,
    pg_dsn: str,
) -> Iterator[tuple[Case, Stack, Rebuilt]]:
    case = CASES[request.param]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(case.setup)
    stack = make_stack(kafka_bootstrap)
    with rebuilding(stack) as rebuilt:
        yield case, stack, rebuilt


def _emptied(rebuilt: Rebuilt, table: str) -> bool:
    rebuilt.drain()
    return not rebuilt.tables.get(table)


def _snapshots_done(stack: Stack, tables: tuple[str, ...]) -> bool:
    units = stack.status()["units"]
    return all((units.get(t, {}).get("snapshot") or {}).get("state") == "done" for t in tables)


def _replay(stack: Stack, spark: SparkSession, out: Path, **options: Any) -> Manifest:
    return run_replay(stack.replay_options(out, **options), spark, say=lambda line: None)


def _run_ddl(case: Case, stack: Stack, rebuilt: Rebuilt, writers: Writers) -> None:
    """The case's DDL while the writers write (and, if the case says so, while a snapshot
    of its first table runs)."""
    if case.during_snapshot:
        first = case.tables[0]
        asked = httpx.post(f"{stack.bridge_url}/units/{first}/snapshot", timeout=10)
        assert asked.status_code == 202, asked.text
        wait_until(lambda: not _snapshots_done(stack, (first,)), timeout=30, what="a run")
    for statement in case.ddl:
        if statement == CREATE_AGAIN:
            # Dropped: consumers hold none of its rows any more (it takes no writes).
            wait_until(lambda: _emptied(rebuilt, "public.a"), timeout=60, what="the drop")
            statement = _table("a")
        else:
            writers.wait_for(20)
        running = not _snapshots_done(stack, case.tables[:1])
        stack.sql(statement)
        assert running or not case.during_snapshot, "the run was over before the DDL"


@pytest.mark.parametrize("case_stack", sorted(CASES), indirect=True)
def test_history_stays_the_table_through_ddl(
    case_stack: tuple[Case, Stack, Rebuilt], spark: SparkSession
) -> None:
    case, stack, rebuilt = case_stack
    out = stack.snapshots_dir
    with contextlib.ExitStack() as cleanup:
        writers = Writers(stack.app_dsn, case.tables).start()
        cleanup.callback(writers.stop)
        writers.wait_for(20)
        stack.start_bridge(snapshot_chunk=50 if case.during_snapshot else 10_000)
        wait_until(lambda: _snapshots_done(stack, case.tables), timeout=180, what="snapshots")
        writers.wait_for(50)
        # Before the DDL: a snapshot (exact: no run under way), its readers caught up.
        before = _replay(stack, spark, out)
        assert before.changeserver_sequence is not None
        poller = Poller(stack.changeserver_url)
        poller.load()
        while poller.poll():
            pass
        stopped = threading.Event()
        cleanup.callback(stopped.set)
        poller.follow(stopped)
        subscriber = Subscriber(stack, before, snapshot_tables(spark, before))
        cleanup.callback(subscriber.close)

        _run_ddl(case, stack, rebuilt, writers)
        wait_until(lambda: bool(poller.told), timeout=60, what="the poller told")
        writers.wait_for(100)
        writers.stop()

        expected = _database(stack, case.tables)
        wait_until(lambda: _snapshots_done(stack, case.tables), timeout=180, what="the runs")
        wait_until(
            lambda: not _differences(_rebuilt(rebuilt), expected, exact=False),
            timeout=120,
            what="the bridge caught up",
        )
        assert rebuilt.duplicate_eids() == []

        caught_up = Sequence.parse(stack.status()["position"])
        incremental = _replay(stack, spark, out)
        assert incremental.base_snapshot_id == before.snapshot_id
        assert incremental.changeserver_sequence is not None
        assert Sequence.parse(incremental.changeserver_sequence) >= caught_up
        full = _replay(stack, spark, out, full=True)
        for manifest in (incremental, full):
            assert _differences(snapshot_tables(spark, manifest), expected, exact=True) == []
            for table in case.tables:
                if expected[table]:
                    names = {c.name for c in manifest.tables[table].columns}
                    assert names == set(next(iter(expected[table].values()))), table

        wait_until(
            lambda: not _differences(subscriber.tables(), expected, exact=False),
            timeout=120,
            what="the subscription",
        )
        assert subscriber.consumer.duplicate_eids() == []

        assert any(t in poller.told for t in case.tables), poller.told
        wait_until(poller.joined, timeout=30, what="the poller to stop")
        poller.load()  # the newest snapshot: after the DDL
        while poller.poll():
            pass
        assert poller.rows() == _selector_rows(stack, case.tables)
