"""``--format delta`` writes Delta tables that read back as the database (full, and incremental
from a Delta base); a replay process SIGKILLed while it writes leaves the newest snapshot as
it was, its Spark driver JVM dies with it, and the next run removes the killed run's directory
and builds on that snapshot."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from changebroker.chaos.faults import family
from changebroker.replay import run_replay, snapshots, writing
from changebroker.stack.processes import wait_until
from tests.support.bridge_stack import Rebuilt, Stack, rebuilding, table_rows
from tests.support.replay_snapshots import snapshot_tables

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

TABLES = ["public.things", "public.pairs"]

SCHEMA = """
CREATE TABLE things (id bigint PRIMARY KEY, label text, amount numeric(12,2), at timestamptz,
    blob bytea, doc jsonb, r real, _change_selector text DEFAULT 'bridge');
CREATE TABLE pairs (a int, b text, n bigint, _change_selector text DEFAULT 'bridge',
    PRIMARY KEY (a, b));
ALTER TABLE things REPLICA IDENTITY FULL;
ALTER TABLE pairs REPLICA IDENTITY FULL;
INSERT INTO things (id, label, amount, at, blob, doc, r)
    SELECT i, 'thing ' || i, i * 1.25, '2026-11-23 10:00:00+00'::timestamptz + i * interval '1 s',
           decode(md5(i::text), 'hex'), jsonb_build_object('i', i), i / 3.0
    FROM generate_series(1, 300) i;
INSERT INTO pairs SELECT i % 7, 'k' || i, i::bigint * 1000000007 FROM generate_series(1, 100) i;
"""

MORE = """
UPDATE things SET label = NULL, amount = amount * 2, r = 'NaN' WHERE id % 5 = 0;
DELETE FROM things WHERE id % 7 = 0;
INSERT INTO things (id, label) SELECT i, 'new' FROM generate_series(301, 320) i;
UPDATE pairs SET b = b || '-moved' WHERE a = 3;
DELETE FROM pairs WHERE a = 4;
"""


def _database(stack: Stack) -> dict[str, dict[tuple[object, ...], dict[str, object]]]:
    return {table: table_rows(stack.app_dsn, table) for table in TABLES}


def _published(rebuilt: Rebuilt) -> None:
    wait_until(lambda: rebuilt.equals_database(TABLES), timeout=120, what="the bridge to publish")


def _running(pid: int) -> bool:
    """Any thread of ``pid`` not yet exited: an exiting JVM's main thread is a zombie while
    its other threads (and its locks) live on."""
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended while we looked
    return False


def test_delta_tables_and_a_killed_run(stack: Stack, spark: SparkSession, tmp_path: Path) -> None:
    out = tmp_path / "snapshots"
    options = stack.replay_options(out, format="delta")
    stack.sql(SCHEMA)
    stack.start_bridge()
    with rebuilding(stack) as rebuilt:
        _published(rebuilt)
        first = run_replay(options, spark)
        assert snapshot_tables(spark, first) == _database(stack)
        stack.sql(MORE)
        _published(rebuilt)
    final = _database(stack)

    incremental = run_replay(options, spark)
    assert incremental.base_snapshot_id == first.snapshot_id
    for table, entry in incremental.tables.items():
        assert entry.format == "delta"
        path = incremental.table_path(table)
        assert (path / "_delta_log").is_dir()
        # One commit: its data files are the table for a reader of plain Parquet too.
        assert spark.read.parquet(str(path)).count() == entry.rows == len(final[table])
    assert snapshot_tables(spark, incremental) == final
    parquet = run_replay(dataclasses.replace(options, format="parquet", full=True), spark)
    assert snapshot_tables(spark, parquet) == final
    assert parquet.cursors == incremental.cursors

    # SIGKILL the replay process while it writes its snapshot: its watcher kills its JVM.
    newest = snapshots.newest(out)
    assert newest is not None and newest.snapshot_id == parquet.snapshot_id
    before = {d.name for d in out.iterdir()}
    process = subprocess.Popen(
        [
            sys.executable, "-m", "changebroker.cli", "replay", "--full", "--master", "local[1]",
            "--broker-url", stack.broker_url, "--kafka-bootstrap", stack.kafka_bootstrap,
            "--out", str(out), "--prefix", stack.prefix, "--bridge-name", stack.prefix,
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip

    def writing_tables() -> bool:
        assert process.poll() is None, "the replay ended before it could be killed"
        return any(any(d.glob("tables/*")) for d in out.iterdir() if d.name not in before)

    try:
        wait_until(writing_tables, timeout=240, interval=0.01, what="the replay to write")
        children = family(process.pid)[1:]  # the JVM and the lock's watcher
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    (killed,) = [d for d in out.iterdir() if d.name not in before]
    assert (killed / writing.LOCK).is_file() and not (killed / snapshots.MANIFEST).exists()
    newest = snapshots.newest(out)
    assert newest is not None and newest.snapshot_id == parquet.snapshot_id
    wait_until(
        lambda: not any(_running(pid) for pid in children),
        timeout=30,
        what="the killed replay's JVM to exit",
    )

    # The next run removes what the killed one left and builds on the newest snapshot.
    said: list[str] = []
    after = run_replay(options, spark, say=said.append)
    assert not killed.exists()
    assert f"replay: removed {killed}, which a killed or failed run left unfinished" in said
    assert after.base_snapshot_id == parquet.snapshot_id
    assert snapshot_tables(spark, after) == final
    newest = snapshots.newest(out)
    assert newest is not None and newest.snapshot_id == after.snapshot_id
