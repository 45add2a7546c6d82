"""A table's snapshot through the whole path: existing rows read in chunks, woven into the
change stream as ``S`` events and committed to Kafka by the bridge; against Postgres's own
``COPY table TO STDOUT`` of the same table in the same run.

Every service runs as its own process (changeserver, registry, broker, bridge), on the local
stack's Postgres and Kafka, in databases of the benchmark's own. The table has 1,000,000 rows
of about 200 bytes, filled before the changeserver starts (existing rows, not changes).

* Idle: the initial snapshot's rows/s (from the bridge answering to the snapshot finishing),
  against ``COPY`` rows/s; the issue's goals are >= 0.3x of COPY and >= 50,000 rows/s. Also
  rows per CPU second of the bridge process: its speed on a core of its own, whatever else
  the machine runs.
* With writers: four writers (one update, insert or delete per transaction, each on its own
  connection) run while a re-snapshot is asked for; its rows/s against COPY, and the writers'
  transactions/s during it against theirs with the bridge streaming and no snapshot.

    .venv/bin/python -m bench bridge_snapshot
"""

from __future__ import annotations

import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.bridge_latency import services
from bench.report import Figure, report
from bench.services import app_and_meta_databases, kafka_bootstrap, server_cpu
from changebroker.stack.processes import wait_until

NAME = "bridge_snapshot"
ROWS = 1_000_000
WRITERS = 4
WRITERS_SECONDS = 10
TABLE = "public.wide"

_SETUP = """
CREATE TABLE wide (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12, 2),
    created timestamptz NOT NULL, flag boolean, payload text);
INSERT INTO wide SELECT i, 'name ' || i, i * 0.25, '2026-01-01'::timestamptz + i * interval '1 s',
    i % 2 = 0, repeat(md5(i::text), 4) FROM generate_series(1, {rows}) i;
ANALYZE wide;
"""


class Writers:
    """Four connections committing one update, insert or delete at a time."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.done = [0] * WRITERS
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(WRITERS)]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def ops(self) -> int:
        return sum(self.done)

    def _run(self, index: int) -> None:
        rng = random.Random(index)
        fresh = ROWS * (index + 2)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.is_set():
                roll = rng.random()
                key = rng.randint(1, ROWS)
                if roll < 0.6:
                    conn.execute("UPDATE wide SET amount = amount + 1 WHERE id = %s", (key,))
                elif roll < 0.85:
                    fresh += 1
                    conn.execute(
                        "INSERT INTO wide VALUES (%s, 'new', 1, now(), true, 'x')", (fresh,)
                    )
                else:
                    conn.execute("DELETE FROM wide WHERE id = %s", (key,))
                self.done[index] += 1

    def rate(self, seconds: float) -> float:
        before, start = self.ops(), time.monotonic()
        time.sleep(seconds)
        return (self.ops() - before) / (time.monotonic() - start)


def _copy_rows_per_second(dsn: str) -> float:
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        start = time.monotonic()
        size = 0
        with cur.copy("COPY wide TO STDOUT") as copy:
            for data in copy:
                size += len(data)
        seconds = time.monotonic() - start
    print(f"COPY: {ROWS:,} rows, {size / ROWS:.0f} bytes a row, {seconds:.2f} s", flush=True)
    return ROWS / seconds


def _snapshot(bridge_url: str) -> dict[str, Any]:
    status = httpx.get(f"{bridge_url}/status", timeout=10).json()
    unit = status["units"].get(TABLE) or {}
    return dict(unit.get("snapshot") or {})


def _wait_done(bridge_url: str, run: str | None = None) -> float:
    """Monotonic time the snapshot (``run``, or any) finished, polled every 50 ms."""

    def done() -> bool:
        found = _snapshot(bridge_url)
        return found.get("state") == "done" and run in (None, found.get("id"))

    wait_until(done, timeout=1800, interval=0.05, what="the snapshot")
    return time.monotonic()


def main() -> int:
    bootstrap = kafka_bootstrap()
    with app_and_meta_databases() as (app_dsn, meta_dsn):
        with psycopg.connect(app_dsn, autocommit=True) as conn:
            conn.execute(_SETUP.format(rows=ROWS))
        copy_rate = _copy_rows_per_second(app_dsn)
        with tempfile.TemporaryDirectory() as tmp:
            state = Path(tmp) / "bench"
            state.mkdir()
            args = ("--include", TABLE)
            with services(app_dsn, meta_dsn, bootstrap, state, *args) as (bridge, pids):
                figures = _measure(app_dsn, bridge, pids.bridge, copy_rate)
    report(figures)
    return 0


def _measure(app_dsn: str, bridge_url: str, pid: int, copy_rate: float) -> list[Figure]:
    began, cpu = time.monotonic(), server_cpu(pid)  # its initial snapshot is under way
    idle = _snapshot_rate(bridge_url, began, _wait_done(bridge_url))
    per_cpu_second = _snapshot(bridge_url)["rows_read"] / (server_cpu(pid) - cpu)
    writers = Writers(app_dsn)
    writers.start()
    try:
        without = writers.rate(WRITERS_SECONDS)
        asked = time.monotonic()
        answer = httpx.post(f"{bridge_url}/units/{TABLE}/snapshot", timeout=30)
        assert answer.status_code == 202, answer.text
        run = answer.json()["snapshot"]
        before = writers.ops()
        finished = _wait_done(bridge_url, run)
        during = (writers.ops() - before) / (finished - asked)
        busy = _snapshot_rate(bridge_url, asked, finished)
    finally:
        writers.stop()
    return [
        Figure(NAME, f"snapshot rows/s, idle ({ROWS:,} rows)", idle, "rows/s",
               baseline=copy_rate, baseline_name="COPY TO STDOUT"),
        Figure(NAME, "snapshot rows/s, idle, against the goal", idle, "rows/s",
               baseline=50_000.0, baseline_name="goal"),
        Figure(NAME, "snapshot rows per CPU second of the bridge, idle", per_cpu_second,
               "rows/cpu-s", baseline=50_000.0, baseline_name="goal"),
        Figure(NAME, f"snapshot rows/s, {WRITERS} writers", busy, "rows/s",
               baseline=copy_rate, baseline_name="COPY TO STDOUT"),
        Figure(NAME, "writers' transactions/s during the snapshot", during, "tx/s",
               baseline=without, baseline_name="without a snapshot"),
    ]  # fmt: skip


def _snapshot_rate(bridge_url: str, start: float, end: float) -> float:
    rows = _snapshot(bridge_url)["rows_read"]
    print(f"snapshot: {rows:,} rows in {end - start:.2f} s", flush=True)
    return float(rows) / (end - start)


if __name__ == "__main__":
    sys.exit(main())
