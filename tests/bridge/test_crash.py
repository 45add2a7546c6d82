"""Exactly once across crashes: the bridge SIGKILLed and restarted several times, stopped by
SIGTERM (it drains: the batch under way committed, gone within a bound), and its Kafka
restarted, during a mixed workload; the tables rebuilt from committed events still equal the
database and no eid is committed twice.

The Kafka is one of this test's own, SIGKILLed and started again: restarting the session's
shared one would disturb every other test's clients.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from changebroker.stack.kafka import LocalKafka
from changebroker.stack.processes import free_port, pid_alive, read_pid, wait_until
from changebroker.state import StateDir
from tests.support.bank import TABLES, transfer
from tests.support.bridge_stack import Stack, rebuilding
from tests.support.services import CACHE

DRAIN_BOUND = 15.0  # seconds: the graceful shutdown's 10, and some


# After each transfer, at most one of these, each in its share of the transactions, on one of
# accounts 51 to 59 (which come and go: a transfer may name one that is not there).
CHURN: list[tuple[float, str, Callable[[int], tuple[int, ...]]]] = [
    (0.1, "DELETE FROM transfers WHERE id %% 7 = %s", lambda key: (key % 7,)),
    (
        0.1,
        "INSERT INTO accounts VALUES (%s, 0, 'new') ON CONFLICT (id) DO UPDATE SET note = 'again'",
        lambda key: (key,),
    ),
    (0.05, "DELETE FROM accounts WHERE id = %s", lambda key: (key,)),
    # A key change; id + 100 may be taken already (the update then changes nothing).
    (
        0.05,
        "UPDATE accounts SET id = id + 100 WHERE id = %s"
        " AND NOT EXISTS (SELECT 1 FROM accounts WHERE id = %s)",
        lambda key: (key, key + 100),
    ),
]


def _workload(dsn: str, stop: threading.Event, done: list[int]) -> None:
    """Multi-row transactions over both tables: moves, inserts, deletes, key changes."""
    rng = random.Random(7)
    with psycopg.connect(dsn) as conn:
        while not stop.is_set():
            transfer(conn, rng, range(1, 60))
            roll = rng.random()
            for share, statement, params in CHURN:
                if roll < share:
                    conn.execute(statement, params(rng.randint(51, 59)))
                    break
                roll -= share
            conn.commit()
            done[0] += 1


def test_sigkills_and_a_kafka_restart_lose_nothing_and_repeat_nothing(
    make_stack: Callable[[str], Stack], tmp_path: Path
) -> None:
    kafka = LocalKafka(StateDir(tmp_path / "kafka", cache_root=CACHE), free_port(), free_port())
    kafka.start()
    try:
        stack = make_stack(kafka.bootstrap)
        stack.sql(TABLES)
        bridge = stack.bridge_process().start()
        stop = threading.Event()
        done = [0]
        writer = threading.Thread(target=_workload, args=(stack.app_dsn, stop, done))
        writer.start()
        try:

            def progressed() -> Callable[[], bool]:
                start = sum(u["events"] for u in stack.status()["units"].values())
                return lambda: sum(u["events"] for u in stack.status()["units"].values()) > start

            for _ in range(3):
                wait_until(progressed(), timeout=30, what="the bridge to publish")
                bridge.kill()
                bridge.start()
            wait_until(progressed(), timeout=30, what="the bridge to publish")
            started = time.monotonic()
            code = bridge.stop()
            took = time.monotonic() - started
            assert took < DRAIN_BOUND, f"the bridge took {took:.1f}s to drain"
            # uvicorn finishes open work, then re-raises SIGTERM: the exit says how it stopped.
            assert code in (0, -signal.SIGTERM), code
            assert "Application shutdown complete" in bridge.log_path.read_text()
            bridge.start()
            wait_until(progressed(), timeout=30, what="the bridge to publish")
            # A crash, not a clean shutdown: open transactions die with it.
            kafka_pid = read_pid(kafka.pid_file)
            assert kafka_pid is not None
            os.kill(kafka_pid, signal.SIGKILL)
            wait_until(lambda: not pid_alive(kafka_pid), timeout=30, what="Kafka to die")
            kafka.start()
            wait_until(progressed(), timeout=60, what="the bridge to publish after Kafka")
            bridge.kill()
            bridge.start()
            wait_until(progressed(), timeout=30, what="the bridge to publish")
        finally:
            stop.set()
            writer.join()
        assert done[0] > 100
        tables = ["public.accounts", "public.transfers"]
        with rebuilding(stack) as rebuilt:
            wait_until(lambda: rebuilt.equals_database(tables), timeout=60, what="rebuilt tables")
            assert rebuilt.duplicate_eids() == []
        bridge.stop()
    finally:
        kafka.stop()
