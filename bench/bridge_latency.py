"""Commit-to-delivery through the whole path: Postgres -> changeserver -> bridge -> Kafka ->
a consumer of committed events; and the sustained rate of that path.

Every service runs as its own process, as deployed (changeserver, registry, broker, bridge),
on the local stack's Postgres and Kafka, in databases of the benchmark's own.

* Latency: a writer commits a 10-row transaction every 2 ms at most (about 2,000 changes/s
  here: each commit takes its own time; the rate reached is in the figure's name) for 15 s;
  each transaction's latency is from its commit returning to the writer until its last row's
  event is read by a ``read_committed`` Kafka consumer (subscriptions had not landed when
  this was written; a subscription serves the same committed data). p50 and p99 against the
  goal (p99 <= 50 ms at about 2,000 changes/s).
* Sustained rate: a burst of 200,000 changes (transactions of 100 rows) committed inside
  Postgres as fast as it can; the rate is changes over the time from the burst's first commit
  to its last event being read, against Postgres's own commit rate of the burst (the same
  run): a ratio of 1 means the bridge kept pace with Postgres. The bridge's and the
  changeserver's CPU time per change over the burst go with it (steadier than the rate on a
  shared machine), and the whole machine's: every process's, Postgres, Kafka and this
  benchmark's consumer too. The machine's cores divided by that is the rate it could reach
  with every core busy all along.

    .venv/bin/python -m bench bridge_latency
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import orjson
import psycopg
from confluent_kafka import Consumer, TopicPartition

from bench.report import Figure, report
from bench.services import app_and_meta_databases, kafka_bootstrap, machine_busy_cpu, server_cpu
from changebroker import kafka
from changebroker.stack.processes import answers, free_port, wait_until

NAME = "bridge_latency"
STEADY_SECONDS = 15
STEADY_INTERVAL = 0.002
STEADY_ROWS = 10
BURST_TRANSACTIONS = 2_000
BURST_ROWS = 100
GOAL_P99_MS = 50.0

_SETUP = """
CREATE TABLE items (id bigint PRIMARY KEY, name text, amount numeric,
    _change_selector text DEFAULT 'bridge');
CREATE PROCEDURE burst(transactions int, rows_each int, first bigint)
LANGUAGE plpgsql AS $$
BEGIN
  FOR t IN 0..transactions - 1 LOOP
    INSERT INTO items (id, name, amount)
      SELECT first + t * rows_each + g, 'item', g * 1.5 FROM generate_series(1, rows_each) g;
    COMMIT;
  END LOOP;
END $$;
"""


class Pids(NamedTuple):
    bridge: int
    changeserver: int
    registry: int
    broker: int


class Deliveries:
    """A read_committed consumer of the event type's topic: when each row id was read."""

    def __init__(self, bootstrap: str, meta_dsn: str, event_type: str) -> None:
        self.seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._consumer = Consumer(
            kafka.client_config(
                bootstrap,
                **{
                    "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "fetch.wait.max.ms": 5,
                },
            )
        )
        with psycopg.connect(meta_dsn) as conn:
            row = conn.execute(
                "SELECT topic, partitions FROM broker_event_types WHERE name = %s", (event_type,)
            ).fetchone()
        assert row is not None, f"no event type {event_type}"
        self._consumer.assign([TopicPartition(row[0], p, 0) for p in range(row[1])])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            # consume() waits out its timeout unless the batch fills: keep it short, or the
            # wait would count as delivery latency. orjson: this consumer shares the cores
            # with what it measures (json.loads took 6 µs of CPU per change of the burst).
            for message in self._consumer.consume(10_000, 0.002):
                value = message.value()
                if message.error() is None and value is not None:
                    self.seen[orjson.loads(value)["data"]["id"]] = time.monotonic()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._consumer.close()


@contextlib.contextmanager
def services(
    app_dsn: str, meta_dsn: str, bootstrap: str, state: Path, *bridge_args: str
) -> Iterator[tuple[str, Pids]]:
    """changeserver, registry, broker and bridge (``bridge_args`` added) as processes;
    yields the bridge's URL and the process ids."""
    ports = {name: free_port() for name in ("cs", "csm", "registry", "broker", "bridge")}
    loopback = "http://127.0.0.1"
    commands = [
        (["changeserver", "--pg-url", app_dsn, "--slot", state.name, "--db-dir",
          str(state / "log"), "--port", str(ports["cs"]), "--mgmt-port", str(ports["csm"])],
         f"{loopback}:{ports['csm']}/ready"),
        (["registry", "--port", str(ports["registry"]), "--pg-url", meta_dsn],
         f"{loopback}:{ports['registry']}/health"),
        (["broker", "--port", str(ports["broker"]), "--pg-url", meta_dsn,
          "--kafka-bootstrap", bootstrap], f"{loopback}:{ports['broker']}/health"),
        (["bridge", "--port", str(ports["bridge"]), "--pg-url", app_dsn, "--meta-pg-url",
          meta_dsn, "--kafka-bootstrap", bootstrap, "--name", state.name,
          "--changeserver-url", f"{loopback}:{ports['cs']}",
          "--broker-url", f"{loopback}:{ports['broker']}", "--publication", state.name,
          *bridge_args],
         f"{loopback}:{ports['bridge']}/health"),
    ]  # fmt: skip
    processes: list[subprocess.Popen[bytes]] = []
    with open(state / "services.log", "ab") as log:
        try:
            for args, ready in commands:
                processes.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "changebroker.cli", *args],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
                wait_until(functools.partial(answers, ready), timeout=120, what=args[0])
            changeserver, registry, broker, bridge = (p.pid for p in processes)
            yield f"{loopback}:{ports['bridge']}", Pids(bridge, changeserver, registry, broker)
            httpx.get(f"{loopback}:{ports['csm']}/markdown")  # the slot goes at shutdown
        finally:
            for process in reversed(processes):
                process.terminate()
                process.wait(timeout=60)


def main() -> int:
    bootstrap = kafka_bootstrap()
    with app_and_meta_databases() as (app_dsn, meta_dsn):
        with psycopg.connect(app_dsn, autocommit=True) as conn:
            conn.execute(_SETUP)
        with tempfile.TemporaryDirectory() as tmp:
            state = Path(tmp) / "bench"
            state.mkdir()
            with services(app_dsn, meta_dsn, bootstrap, state) as (_, pids):
                figures = _measure(app_dsn, meta_dsn, bootstrap, pids)
    report(figures)
    return 0


def _measure(app_dsn: str, meta_dsn: str, bootstrap: str, pids: Pids) -> list[Figure]:
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO items (id, name) VALUES (0, 'first')")  # creates the type
        event_type = "changebroker.public.items"
        wait_until(lambda: _exists(meta_dsn, event_type), timeout=60, what="the event type")
        deliveries = Deliveries(bootstrap, meta_dsn, event_type)
        try:
            wait_until(lambda: 0 in deliveries.seen, timeout=60, what="the first event")
            committed: dict[int, float] = {}  # last row id of each transaction -> commit time
            next_id = 1
            start = time.monotonic()
            while time.monotonic() - start < STEADY_SECONDS:
                with conn.transaction():
                    conn.execute(
                        "INSERT INTO items (id, name) SELECT g, 'steady'"
                        " FROM generate_series(%s::bigint, %s::bigint) g",
                        (next_id, next_id + STEADY_ROWS - 1),
                    )
                next_id += STEADY_ROWS
                committed[next_id - 1] = time.monotonic()
                time.sleep(max(0.0, STEADY_INTERVAL - (time.monotonic() - committed[next_id - 1])))
            last = next_id - 1
            wait_until(lambda: last in deliveries.seen, timeout=120, what="steady events")
            latencies = sorted(deliveries.seen[i] - t for i, t in committed.items())
            steady_rate = (last) / (max(committed.values()) - start)

            first = next_id
            burst = BURST_TRANSACTIONS * BURST_ROWS
            final = first + burst
            conn.execute("SET synchronous_commit = off")
            cpu_before = {pid: server_cpu(pid) for pid in (pids.bridge, pids.changeserver)}
            machine_before = machine_busy_cpu()
            began = time.monotonic()
            conn.execute("CALL burst(%s, %s, %s)", (BURST_TRANSACTIONS, BURST_ROWS, first - 1))
            pg_done = time.monotonic()
            wait_until(lambda: final - 1 in deliveries.seen, timeout=600, what="the burst")
            delivered = deliveries.seen[final - 1]
            cpu = {pid: server_cpu(pid) - before for pid, before in cpu_before.items()}
            machine = machine_busy_cpu() - machine_before
        finally:
            deliveries.close()
    cut = [latencies[int(len(latencies) * q)] * 1000 for q in (0.5, 0.99)]
    cores = os.cpu_count() or 1
    return [
        Figure(NAME, f"commit-to-delivery p50 at {steady_rate:,.0f} changes/s", cut[0], "ms",
               higher_is_better=False),
        Figure(NAME, f"commit-to-delivery p99 at {steady_rate:,.0f} changes/s", cut[1], "ms",
               baseline=GOAL_P99_MS, baseline_name="goal", higher_is_better=False),
        Figure(NAME, f"sustained changes/s ({burst:,} changes)", burst / (delivered - began),
               "changes/s", baseline=burst / (pg_done - began),
               baseline_name="postgres commit rate"),
        Figure(NAME, "lag after the last commit", (delivered - pg_done) * 1000, "ms",
               higher_is_better=False),
        Figure(NAME, "bridge CPU per change (burst)", cpu[pids.bridge] / burst * 1e6, "µs",
               higher_is_better=False),
        Figure(NAME, "changeserver CPU per change (burst)", cpu[pids.changeserver] / burst * 1e6,
               "µs", higher_is_better=False),
        Figure(NAME, "machine CPU per change, every process (burst)", machine / burst * 1e6, "µs",
               higher_is_better=False),
        Figure(NAME, "machine busy over the burst", machine / (delivered - began) / cores * 100,
               "%", higher_is_better=False),
        Figure(NAME, "rate with every core busy (cores / machine CPU per change)",
               cores * burst / machine, "changes/s"),
    ]  # fmt: skip


def _exists(meta_dsn: str, event_type: str) -> bool:
    with psycopg.connect(meta_dsn) as conn:
        query = "SELECT 1 FROM broker_event_types WHERE name = %s"
        return conn.execute(query, (event_type,)).fetchone() is not None


if __name__ == "__main__":
    sys.exit(main())
