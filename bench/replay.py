"""The replay job's speed: a full replay from Kafka against DuckDB doing the same compaction
over the same events exported to Parquet, in the same run; and an incremental run.

* Full: N changes (sizes from ``CHANGEBROKER_BENCH_REPLAY_SIZES``, default 1M and 5M) over
  100k keys (the first change of each key a ``C``, then 80% ``U``, 10% ``D``, 10% ``C``),
  written straight into the topic of a data event type created through the broker, in the
  bridge's event format. Spark ``local[2]``: changes/s of ``run_replay`` (the JVM start
  reported apart); DuckDB (2 threads): the same last-state-per-key over the events' columns
  in Parquet, written to Parquet. Goal: >= 300k changes/s at 5M. Also changes per CPU-second
  of the Spark JVM: on a shared machine the wall time mostly measures the other load.
* Incremental: 100k new changes onto a 1M-row snapshot, ``changebroker replay`` as a
  process, wall time including the JVM start. Goal: <= 15 s. Then the same run (onto the
  same base) in this process's warm SparkSession, as ``replay --every`` runs it.

    .venv/bin/python -m bench replay          # needs duckdb: pip install -e '.[bench]'
    CHANGEBROKER_BENCH_REPLAY_SIZES=1000000 .venv/bin/python -m bench replay
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import duckdb
import httpx
from confluent_kafka import Producer

from bench.report import Figure, report
from bench.services import kafka_bootstrap, pg_server_dsn
from changebroker import kafka, pg
from changebroker.bridge.data_events import record_key
from changebroker.bridge.event_types import data_event_type
from changebroker.bridge.tables import Table
from changebroker.replay import ReplayOptions, run_replay
from changebroker.stack.processes import answers, free_port, wait_until

NAME = "replay"
KEYS = 100_000
PARTITIONS = 4
KEY = ("id",)
INCREMENTAL_ROWS = 1_000_000
INCREMENTAL_CHANGES = 100_000
SIZES = [int(s) for s in os.environ.get(f"CHANGEBROKER_BENCH_{NAME.upper()}_SIZES", "").split(",")
         if s] or [1_000_000, 5_000_000]  # fmt: skip

# The events' columns, as DuckDB generates them: seq is the change order.
_EVENTS = """
CREATE OR REPLACE TABLE events AS
SELECT i AS seq,
       CASE WHEN i < {keys} THEN i ELSE hash(i) % {keys} END::BIGINT AS id,
       CASE WHEN i < {keys} THEN 'C'
            WHEN hash(i * 7) % 10 = 0 THEN 'D' WHEN hash(i * 7) % 10 = 1 THEN 'C'
            ELSE 'U' END AS op,
       'item ' || (i % 1000) AS name,
       ((i % 1000003) / 100)::DECIMAL(18, 2)::VARCHAR AS amount,
       (i % 1000)::INTEGER AS qty,
       TIMESTAMPTZ '2026-01-01 00:00:00+00' + to_microseconds(i * 1000) AS changed_at
FROM range({first}, {first} + {count}) t(i)
"""
_COMPACTION = """
COPY (SELECT id, name, amount, qty, changed_at FROM (
        SELECT *, row_number() OVER (PARTITION BY id ORDER BY seq DESC) AS newest
        FROM read_parquet('{events}'))
      WHERE newest = 1 AND op <> 'D') TO '{out}' (FORMAT parquet)
"""
_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"description": "bigint", "type": "integer"},
        "name": {"description": "text", "type": ["string", "null"]},
        "amount": {
            "description": "numeric, as a string, every digit kept",
            "type": ["string", "null"],
        },
        "qty": {"description": "integer", "type": ["integer", "null"]},
        "at": {
            "description": "timestamp with time zone, RFC 3339 with offset",
            "type": ["string", "null"],
        },
        "_change_selector": {"description": "text", "type": ["string", "null"]},
    },
    "required": ["id"],
}  # fmt: skip


@contextlib.contextmanager
def _broker(meta_dsn: str, bootstrap: str, log: Path) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "changebroker.cli", "broker", "--port", str(port),
         "--pg-url", meta_dsn, "--kafka-bootstrap", bootstrap],
        stdout=log.open("ab"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_until(lambda: answers(f"{url}/health"), timeout=120, what="the broker")
        yield url
    finally:
        process.terminate()
        process.wait(60)


def _event_type(broker: str, name: str) -> str:
    """Create the bridge's data event type of the bench's table; its topic."""
    table = Table(name.split(".", 1)[1], (), KEY)
    body = data_event_type(name, table, _SCHEMA, PARTITIONS)
    httpx.post(f"{broker}/event-types", json=body, timeout=60).raise_for_status()
    return str(httpx.get(f"{broker}/event-types/{name}/timelines").json()[0]["topic"])


def _generate(db: duckdb.DuckDBPyConnection, first: int, count: int, keys: int) -> None:
    db.execute(_EVENTS.format(first=first, count=count, keys=keys))


def _produce(db: duckdb.DuckDBPyConnection, bootstrap: str, topic: str, name: str) -> float:
    """The events in the bridge's format and keyed as it keys them, in change order, one
    partition per key; events/s."""
    producer = Producer(
        kafka.producer_config(bootstrap, **{"linger.ms": 50, "batch.size": 1_000_000})
    )
    cursor = db.execute(
        "SELECT seq, id, op, name, amount, qty,"
        " strftime(changed_at, '%Y-%m-%dT%H:%M:%S.%f') || '+00:00' FROM events ORDER BY seq"
    )
    table = name.split(".", 1)[1]
    head = '{"metadata":{"eid":"00000000-0000-5000-8000-%012d",'
    head += '"occurred_at":"2026-01-01T00:00:00Z","received_at":"2026-01-01T00:00:00.000Z",'
    head += '"flow_id":"bench","event_type":"' + name + '","partition":"%d","version":"1.0.0"},'
    head += '"data_op":"%s","data_type":"' + table + '",'
    head += '"data":{"id":%d,"name":"%s","amount":"%s","qty":%d,"at":"%s",'
    head += '"_change_selector":"bridge"}}'
    started, count = time.monotonic(), 0
    while rows := cursor.fetchmany(100_000):
        for seq, key, op, text, amount, qty, at in rows:
            partition = key % PARTITIONS
            value = head % (seq, partition, op, key, text, amount, qty, at)
            while True:
                try:
                    producer.produce(
                        topic, value.encode(), record_key({"id": key}, KEY), partition=partition
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            count += 1
        producer.poll(0)
    producer.flush(300)
    return count / (time.monotonic() - started)


def _jvm_cpu(spark: object) -> float:
    """CPU seconds the Spark driver JVM (in local mode: every task too) has used: what a
    replay costs whatever else the machine runs, where its wall time is not."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[attr-defined]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _duckdb_rate(db: duckdb.DuckDBPyConnection, tmp: Path, count: int) -> tuple[float, float]:
    """DuckDB's changes/s and changes per CPU-second (it runs in this process)."""
    events, out = tmp / f"events-{count}.parquet", tmp / f"duck-{count}.parquet"
    db.execute(f"COPY events TO '{events}' (FORMAT parquet)")
    db.execute("SET threads = 2")
    started, cpu = time.monotonic(), _process_cpu()
    db.execute(_COMPACTION.format(events=events, out=out))
    return count / (time.monotonic() - started), count / (_process_cpu() - cpu)


def _process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    server_dsn = pg_server_dsn()
    bootstrap = kafka_bootstrap()
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    figures = []
    with (
        tempfile.TemporaryDirectory() as scratch,
        pg.scratch_database(server_dsn, "bench_meta") as meta_dsn,
        _broker(meta_dsn, bootstrap, Path(scratch) / "broker.log") as broker,
    ):
        tmp = Path(scratch)
        db = duckdb.connect()
        from changebroker.replay.spark import spark_session

        started = time.monotonic()
        spark = spark_session("local[2]", app_name="bench-replay")
        jvm = time.monotonic() - started
        print(f"JVM and SparkSession: {jvm:.1f}s", flush=True)
        figures.append(Figure(NAME, "JVM + SparkSession start, local[2]", jvm, "s",
                              higher_is_better=False))  # fmt: skip
        for size in SIZES:
            name = f"{prefix}.public.items{size}"
            topic = _event_type(broker, name)
            _generate(db, 0, size, KEYS)
            rate = _produce(db, bootstrap, topic, name)
            print(f"{size:,} changes produced at {rate:,.0f}/s", flush=True)
            duck, duck_cpu = _duckdb_rate(db, tmp, size)
            options = ReplayOptions(
                broker_url=broker, kafka_bootstrap=bootstrap, out=tmp / f"snapshots-{size}",
                event_types=(name,), prefix=prefix,
            )  # fmt: skip
            began, cpu = time.monotonic(), _jvm_cpu(spark)
            run_replay(options, spark)
            ours = size / (time.monotonic() - began)
            per_cpu = size / (_jvm_cpu(spark) - cpu)
            figures.append(
                Figure(NAME, f"full replay changes per JVM CPU-second, {size:,} changes",
                       per_cpu, "changes/cpu-s", baseline=duck_cpu,
                       baseline_name="duckdb per CPU-second")
            )  # fmt: skip
            figures.append(
                Figure(NAME, f"full replay changes/s, {size:,} changes over {KEYS:,} keys",
                       ours, "changes/s", baseline=duck, baseline_name="duckdb, 2 threads")
            )  # fmt: skip
            figures.append(Figure(NAME, f"full replay changes/s, {size:,} changes (goal)", ours,
                                  "changes/s", baseline=300_000, baseline_name="goal"))  # fmt: skip
        figures += _incremental(db, spark, broker, bootstrap, prefix, tmp)
        spark.stop()
    report(figures)
    return 0


def _incremental(
    db: duckdb.DuckDBPyConnection, spark: object, broker: str, bootstrap: str, prefix: str,
    tmp: Path,
) -> list[Figure]:  # fmt: skip
    """A 1M-row snapshot, 100k more changes, then ``changebroker replay`` timed whole, and the
    same run again in ``spark``, warm."""
    name = f"{prefix}.public.big"
    topic = _event_type(broker, name)
    out = tmp / "snapshots-incremental"
    _generate(db, 0, INCREMENTAL_ROWS, INCREMENTAL_ROWS)  # every change a new key
    _produce(db, bootstrap, topic, name)
    options = ReplayOptions(
        broker_url=broker, kafka_bootstrap=bootstrap, out=out, event_types=(name,), prefix=prefix
    )
    base = run_replay(options, spark)  # type: ignore[arg-type]
    assert base.tables["public.big"].rows == INCREMENTAL_ROWS
    _generate(db, INCREMENTAL_ROWS, INCREMENTAL_CHANGES, INCREMENTAL_ROWS)
    _produce(db, bootstrap, topic, name)
    began = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "changebroker.cli", "replay", "--event-types", name,
         "--prefix", prefix, "--broker-url", broker, "--kafka-bootstrap", bootstrap,
         "--out", str(out), "--master", "local[2]"],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    wall = time.monotonic() - began
    began = time.monotonic()
    run_replay(dataclasses.replace(options, base=base.snapshot_id), spark)  # type: ignore[arg-type]
    warm = time.monotonic() - began
    what = f"incremental: {INCREMENTAL_CHANGES:,} changes onto a {INCREMENTAL_ROWS:,}-row snapshot"
    return [
        Figure(NAME, f"{what}, wall incl. JVM start", wall, "s", baseline=15.0,
               baseline_name="goal", higher_is_better=False),
        Figure(NAME, f"{what}, in a warm SparkSession (replay --every)", warm, "s",
               baseline=15.0, baseline_name="goal", higher_is_better=False),
    ]  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
