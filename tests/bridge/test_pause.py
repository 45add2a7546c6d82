"""A paused bridge (a long GC, a stopped process) outlives the changeserver's keep-alive
timeout: the server closes the idle connection meanwhile. The bridge, resumed, reads on over
a new connection within the same session (no restart, nothing published twice), and its
long polls keep the connection in use while it runs."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable

import psycopg

from changebroker.http import DEFAULT_IDLE_TIMEOUT
from changebroker.stack.processes import wait_until
from tests.support.bank import TABLES, transfer
from tests.support.bridge_stack import Stack, rebuilding

SESSION_FAILED = "bridge session failed"


def _published(stack: Stack) -> int:
    return sum(unit["events"] for unit in stack.status()["units"].values())


def test_a_pause_past_the_keep_alive_timeout_restarts_no_session(
    make_stack: Callable[[str], Stack], kafka_bootstrap: str
) -> None:
    stack = make_stack(kafka_bootstrap)
    stack.sql(TABLES)
    bridge = stack.bridge_process().start()
    assert bridge.process is not None
    rng = random.Random(3)
    stop = threading.Event()

    def write() -> None:
        with psycopg.connect(stack.app_dsn) as conn:
            while not stop.is_set():
                transfer(conn, rng, range(1, 51))
                conn.commit()
                stop.wait(0.05)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(2):
            before = _published(stack)
            wait_until(lambda: _published(stack) > before, timeout=60, what="events")  # noqa: B023
            os.kill(bridge.process.pid, signal.SIGSTOP)
            try:
                # The server closes a connection idle for its keep-alive timeout.
                time.sleep(DEFAULT_IDLE_TIMEOUT + 3)
            finally:
                os.kill(bridge.process.pid, signal.SIGCONT)
        before = _published(stack)
        wait_until(lambda: _published(stack) > before, timeout=60, what="events after the pause")
    finally:
        stop.set()
        writer.join()
    with rebuilding(stack) as rebuilt:
        tables = ["public.accounts", "public.transfers"]
        wait_until(lambda: rebuilt.equals_database(tables), timeout=60, what="rebuilt tables")
        assert rebuilt.duplicate_eids() == []
    bridge.stop()
    log = bridge.log_path.read_text()
    assert SESSION_FAILED not in log, log[log.find(SESSION_FAILED) - 200 :][:3000]
