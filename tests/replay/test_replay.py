"""The replay job against the real path: Postgres -> changeserver -> bridge (SIGKILLed once)
-> broker -> Kafka -> Spark -> Parquet, compared with ``SELECT *`` value for value.

One stack and one workload serve the whole story, since every Spark run and every stack is
slow on a small machine: a snapshot at recorded cursors equals the database as it was then;
a subscription from that snapshot's manifest brings it to the final state while writes go on,
no eid twice; an incremental snapshot equals a full one and the final state. (A replay killed
while writing: tests/replay/test_delta_and_killed_runs.py.)
"""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from pyspark.sql import SparkSession

from changebroker.replay import run_replay
from changebroker.replay.snapshots import Manifest
from changebroker.stack.processes import wait_until
from changebroker.stack.run import CliProcess
from tests.broker.subscription_support import Stream, commit
from tests.support.bridge_stack import Rebuilt, Stack, rebuilding, table_rows
from tests.support.replay_snapshots import Rows, snapshot_tables

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

TABLES = ["public.items", "public.pairs", "public.notes"]

SCHEMA = """
CREATE TABLE items (
    id bigint PRIMARY KEY,
    flag boolean, small smallint, num integer, big bigint, r real, d double precision,
    amount numeric(40,12), label text, code varchar(20), blob bytea, doc jsonb, raw json,
    at timestamptz, local_at timestamp, day date, uid uuid, span interval, tags int[],
    _change_selector text DEFAULT 'bridge');
CREATE TABLE pairs (a int, b text, n bigint, note text, _change_selector text DEFAULT 'bridge',
    PRIMARY KEY (a, b));
CREATE TABLE notes (id int PRIMARY KEY, body text, _change_selector text DEFAULT 'bridge');
ALTER TABLE items REPLICA IDENTITY FULL;
ALTER TABLE pairs REPLICA IDENTITY FULL;
ALTER TABLE notes REPLICA IDENTITY FULL;
"""

ITEM_COLUMNS = [
    "flag", "small", "num", "big", "r", "d", "amount", "label", "code", "blob", "doc", "raw",
    "at", "local_at", "day", "uid", "span", "tags",
]  # fmt: skip


def _item_value(rng: random.Random, column: str) -> Any:
    """A random value of each column's type, edge cases included; sometimes NULL."""
    if rng.random() < 0.1:
        return None
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
        microseconds=rng.randint(0, 4_000_000_000_000_000)
    )
    choices: dict[str, Callable[[], Any]] = {
        "flag": lambda: rng.random() < 0.5,
        "small": lambda: rng.choice([-32768, 32767, rng.randint(-100, 100)]),
        "num": lambda: rng.choice([-(2**31), 2**31 - 1, rng.randint(-(10**6), 10**6)]),
        "big": lambda: rng.choice([-(2**63), 2**63 - 1, rng.randint(-(10**15), 10**15)]),
        "r": lambda: rng.choice(["NaN", "Infinity", "-Infinity", 1.1, 3.4e38, 1e-30, 0.1]),
        "d": lambda: rng.choice(["NaN", "-Infinity", 1.7976931348623157e308, 5e-324, 0.1]),
        "amount": lambda: rng.choice(
            ["123456789012345678901234567.123456789012", "-0.000000000001", "0", "NaN"]
        ),
        "label": lambda: rng.choice(["", "plain", "quote ' \" \\ tab\t", "ünï€ødé", "NULL"]),
        "code": lambda: uuid.uuid4().hex[:20],
        "blob": lambda: rng.randbytes(rng.randint(0, 40)),
        "doc": lambda: json.dumps(
            rng.choice([{"a": [1, 2.50, None], "b": {"c": "x"}}, "1", 1, True, [], {"k": "v"}])
        ),
        "raw": lambda: json.dumps({"n": rng.randint(0, 9), "s": "text"}),
        "at": lambda: moment,
        "local_at": lambda: moment.replace(tzinfo=None),
        "day": lambda: moment.date(),
        "uid": lambda: uuid.uuid4(),
        "span": lambda: timedelta(seconds=rng.randint(0, 10**7), microseconds=rng.randint(0, 999)),
        "tags": lambda: [rng.randint(0, 9) for _ in range(rng.randint(0, 3))],
    }
    return choices[column]()


class Workload:
    """Random transactions over the three tables: inserts, updates of every column or one,
    deletes, key changes of the composite key, large (TOASTed) texts; and, inside some of
    them, TRUNCATE, ADD COLUMN with a default and RENAME COLUMN of ``notes``."""

    def __init__(self, dsn: str, seed: int) -> None:
        self.dsn = dsn
        self.rng = random.Random(seed)
        self.columns = list(ITEM_COLUMNS)
        self.note_columns: list[str] = []  # added by the DDL, renamed by it too
        self.ddl = 0
        self.transactions = 0

    def add_column(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE items ADD COLUMN extra text")
        self.columns.append("extra")

    def _value(self, column: str) -> Any:
        if column == "extra":
            return self.rng.choice([None, "extra", "more"])
        return _item_value(self.rng, column)

    def _item(self, conn: psycopg.Connection) -> None:
        rng = self.rng
        key = rng.randint(1, 40)
        roll = rng.random()
        if roll < 0.35:
            names = ["id", *self.columns]
            values = [key, *(self._value(c) for c in self.columns)]
            sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in self.columns)
            conn.execute(
                f"INSERT INTO items ({', '.join(names)}) VALUES ({', '.join(['%s'] * len(names))})"
                f" ON CONFLICT (id) DO UPDATE SET {sets}",
                values,
            )
        elif roll < 0.55:
            conn.execute(
                f"UPDATE items SET {', '.join(f'{c} = %s' for c in self.columns)} WHERE id = %s",
                [*(self._value(c) for c in self.columns), key],
            )
        elif roll < 0.85:
            column = rng.choice(self.columns)
            conn.execute(
                f"UPDATE items SET {column} = %s WHERE id = %s", (self._value(column), key)
            )
        else:
            conn.execute("DELETE FROM items WHERE id = %s", (key,))

    def _pair(self, conn: psycopg.Connection) -> None:
        rng = self.rng
        a, b = rng.randint(1, 6), rng.choice("xyz")
        roll = rng.random()
        if roll < 0.4:
            conn.execute(
                "INSERT INTO pairs (a, b, n, note) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (a, b) DO UPDATE SET n = EXCLUDED.n",
                (a, b, rng.randint(-(2**62), 2**62), rng.choice([None, "p"])),
            )
        elif roll < 0.7:
            # A key change; the new key may be taken (then nothing changes).
            conn.execute(
                "UPDATE pairs SET b = %s, note = 'moved' WHERE a = %s AND b = %s"
                " AND NOT EXISTS (SELECT 1 FROM pairs WHERE a = %s AND b = %s)",
                (new := rng.choice("xyz"), a, b, a, new),
            )
        else:
            conn.execute("DELETE FROM pairs WHERE a = %s AND b = %s", (a, b))

    def _note(self, conn: psycopg.Connection) -> None:
        rng = self.rng
        key = rng.randint(1, 8)
        if rng.random() < 0.8:
            # Random text does not compress: past 2 kB it is stored out of line (TOAST).
            body = rng.randbytes(rng.choice([10, 3000])).hex()
            conn.execute(
                "INSERT INTO notes VALUES (%s, %s) ON CONFLICT (id) DO UPDATE SET body = %s",
                (key, body, body),
            )
        elif self.note_columns and rng.random() < 0.5:
            column = rng.choice(self.note_columns)
            conn.execute(
                f"UPDATE notes SET {column} = %s WHERE id = %s", (rng.choice([None, "u"]), key)
            )
        else:
            conn.execute("DELETE FROM notes WHERE id = %s", (key,))

    def _ddl(self, conn: psycopg.Connection) -> None:
        """What the history must survive: rows gone without a delete, a default given to
        existing rows without a row written, a column under a new name."""
        rng = self.rng
        roll = rng.random()
        self.ddl += 1
        if roll < 0.4:
            conn.execute("TRUNCATE notes")
        elif roll < 0.7 or not self.note_columns:
            column = f"added{self.ddl}"
            conn.execute(f"ALTER TABLE notes ADD COLUMN {column} text DEFAULT 'default {column}'")
            self.note_columns.append(column)
        else:
            old = rng.choice(self.note_columns)
            new = f"renamed{self.ddl}"
            conn.execute(f"ALTER TABLE notes RENAME COLUMN {old} TO {new}")
            self.note_columns[self.note_columns.index(old)] = new

    def run(self, transactions: int, ddl: bool = True) -> None:
        with psycopg.connect(self.dsn) as conn:
            for _ in range(transactions):
                operations = [self._item, self._item, self._pair, self._note]
                for _ in range(self.rng.randint(1, 4)):
                    if ddl and self.rng.random() < 0.02:
                        self._ddl(conn)  # among the transaction's changes, in their order
                    self.rng.choice(operations)(conn)
                conn.commit()
                self.transactions += 1


@contextlib.contextmanager
def _stopped(process: CliProcess) -> Iterator[None]:
    try:
        yield
    finally:
        process.stop()


def _database(stack: Stack) -> dict[str, Rows]:
    return {table: table_rows(stack.app_dsn, table) for table in TABLES}


def _differences(snapshot: dict[str, Rows], expected: dict[str, Rows]) -> list[str]:
    """What differs, row for row and value for value (empty: equal). A column a row lacks
    reads as null (the consumer's rows from events: added to the table after the event);
    one the table lacks is not compared (a consumer keeps a column renamed away)."""
    found = []
    for table, rows in expected.items():
        got = snapshot.get(table, {})
        if got.keys() != rows.keys():
            missing, extra = rows.keys() - got.keys(), got.keys() - rows.keys()
            found.append(f"{table}: keys missing {sorted(missing)[:5]}, extra {sorted(extra)[:5]}")
            continue
        for key, row in rows.items():
            have = {column: got[key].get(column) for column in row}
            if have != row:
                diff = {c: (have[c], row[c]) for c in row if have[c] != row[c]}
                found.append(f"{table} {key}: snapshot vs database {diff}")
    return found


def _cursors(stack: Stack) -> dict[str, list[dict[str, str]]]:
    """Every event type's newest offsets: at a quiet point, where the bridge's events end."""
    out = {}
    for table in TABLES:
        name = stack.event_type(table)
        partitions = httpx.get(f"{stack.broker_url}/event-types/{name}/partitions").json()
        out[name] = [
            {"partition": p["partition"], "offset": p["newest_available_offset"]}
            for p in partitions
        ]
    return out


def _quiet(rebuilt: Rebuilt) -> None:
    """Until the bridge has published every committed change (a consumer of its committed
    events rebuilds exactly the database)."""
    if not wait_until(lambda: rebuilt.equals_database(TABLES), timeout=120, what=None):
        assert _differences(rebuilt.tables, _database(rebuilt.stack)) == []


def _handoff(
    stack: Stack, manifest: Manifest, loaded: dict[str, Rows], writer: threading.Thread
) -> Rebuilt:
    """Consume the subscription made from the snapshot's manifest onto the loaded snapshot,
    while ``writer`` writes, until it is done and the rows equal the database."""
    consumer = Rebuilt(stack)
    for table, rows in loaded.items():
        consumer.load(table, rows)
    keys = {entry.event_type: sorted(entry.primary_key) for entry in manifest.tables.values()}
    result = subprocess.run(
        [
            sys.executable, "-m", "changebroker.cli", "replay", "subscribe",
            "--broker-url", stack.broker_url, "--out", str(manifest.directory.parent),  # type: ignore[union-attr]
            "--snapshot", manifest.snapshot_id, "--owning-application", "replay-test",
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    subscription = result.stdout.strip()
    with httpx.Client(base_url=stack.broker_url, timeout=30) as client:
        stream = Stream(client, subscription, batch_flush_timeout=1, batch_limit=100)
        deadline = None
        try:
            while True:
                batch = stream.batch()
                assert batch is not None, "the subscription stream ended"
                for event in batch.get("events", []):
                    cursor = batch["cursor"]
                    consumer.apply(event, keys[cursor["event_type"]], cursor["partition"])
                if batch.get("events"):
                    response = commit(client, subscription, stream.id, [batch["cursor"]])
                    assert response.status_code in (200, 204), response.text
                if not batch.get("events") and not writer.is_alive():
                    deadline = deadline or time.monotonic() + 120
                    differences = _differences(consumer.tables, _database(stack))
                    if not differences:
                        break
                    assert time.monotonic() < deadline, differences[:10]
        finally:
            stream.close()
    return consumer


def test_snapshots_equal_the_database_and_hand_off_to_the_stream(
    stack: Stack, spark: SparkSession, tmp_path: Path
) -> None:
    out = tmp_path / "snapshots"
    stack.sql(SCHEMA)
    workload = Workload(stack.app_dsn, seed=14)
    bridge = stack.bridge_process().start()
    with rebuilding(stack) as rebuilt, _stopped(bridge):
        workload.run(60)
        bridge.kill()  # mid-stream: its open transaction is aborted, nothing is lost
        workload.run(20)
        bridge.start()
        workload.run(30)
        _quiet(rebuilt)  # the table's first schema is in force: the new column is a new version
        workload.add_column()
        workload.run(40)
        _quiet(rebuilt)
        recorded, cursors = _database(stack), _cursors(stack)

        # Writes go on while the snapshot at the recorded cursors is made and handed off (no
        # DDL while it is made: the replay reads the schemas as they are when it runs, and a
        # column renamed since the cursors would not be the recorded table's).
        writer = threading.Thread(target=workload.run, args=(100, False))
        writer.start()
        at_cursors = run_replay(stack.replay_options(out, until=json.dumps(cursors)), spark)
        writer.join()
        assert at_cursors.cursors == cursors
        loaded = snapshot_tables(spark, at_cursors)
        assert _differences(loaded, recorded) == []
        writer = threading.Thread(target=workload.run, args=(150,))
        writer.start()
        try:
            handed = _handoff(stack, at_cursors, loaded, writer)
        finally:
            writer.join()
        assert handed.duplicate_eids() == []
        _quiet(rebuilt)
        final = _database(stack)
        assert _differences(handed.tables, final) == []
        assert rebuilt.duplicate_eids() == []
        position = stack.status()["position"]

    # Incremental (from the snapshot above, the newest) equals full, and both the database.
    incremental = run_replay(stack.replay_options(out), spark)
    assert incremental.base_snapshot_id == at_cursors.snapshot_id
    # Ended where the bridge's position record says its events end: exact at its sequence.
    assert incremental.changeserver_sequence == position
    assert at_cursors.changeserver_sequence is None
    full = run_replay(stack.replay_options(out, full=True), spark)
    assert full.base_snapshot_id is None
    assert _differences(snapshot_tables(spark, incremental), final) == []
    assert snapshot_tables(spark, full) == snapshot_tables(spark, incremental)
    assert full.cursors == incremental.cursors
    rows = {table: entry.rows for table, entry in full.tables.items()}
    assert rows == {table: len(final[table]) for table in TABLES}
    # The table's columns, no more: none dropped or renamed away, every one added.
    for table, entry in full.tables.items():
        with psycopg.connect(stack.app_dsn) as conn:
            cursor = conn.execute(f"SELECT * FROM {table} LIMIT 0")
            assert cursor.description is not None
            assert {c.name for c in entry.columns} == {d.name for d in cursor.description}
    assert workload.ddl >= 5
    assert "extra" in [c.name for c in full.tables["public.items"].columns]
    assert len(full.tables["public.items"].schema_versions) >= 2
