"""What a fleet of changeservers costs and gives, in one run.

1. Long polls: 1,000, 5,000 and 10,000 clients blocked on one selector, then one commit,
   against one changeserver (its own port) and against two behind HAProxy (the balancer's
   port, each server holding about half): commit-to-response p50 and p99, the servers' CPU
   per woken response (both servers together), and HAProxy's own CPU per response. HAProxy
   holds two descriptors per client; within the machine's open-file limit it takes at most
   ``loadbalancer.max_connections()`` clients, and a round above that is run with that many
   (the figure's name says how many).
2. Postgres per slot: a burst of changes committed while one, two and three changeservers
   (each its own slot and walsender) follow it: the walsenders' CPU per change, the writing
   backend's CPU per change (the same whatever the slots), and the WAL each slot held back at
   the burst's end (``pg_current_wal_lsn() - restart_lsn``). Read from ``/proc``, so Postgres
   must run on this machine; the figures are approximate (one burst, a shared machine).

    .venv/bin/python -m bench changeserver_fleet
    CHANGEBROKER_BENCH_FLEET_CLIENTS=200 CHANGEBROKER_BENCH_FLEET_CHANGES=2000 \\
        .venv/bin/python -m bench changeserver_fleet     # a small run, to check it works
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg

from bench.changeserver_longpoll import Group, measuring, settle
from bench.report import Figure, report
from bench.services import pg_server_dsn, server_cpu
from changebroker import pg
from changebroker.stack.loadbalancer import LoadBalancer, max_connections
from changebroker.stack.processes import free_port, read_pid, wait_until
from changebroker.stack.run import changeserver_process
from changebroker.state import StateDir

NAME = "changeserver_fleet"
CLIENTS = tuple(
    int(n) for n in os.environ.get("CHANGEBROKER_BENCH_FLEET_CLIENTS", "1000,5000,10000").split(",")
)
CHANGES = int(os.environ.get("CHANGEBROKER_BENCH_FLEET_CHANGES", "50000"))
ROWS_PER_TRANSACTION = 10
SLOTS = (1, 2, 3)


@contextlib.contextmanager
def _servers(dsn: str, state: Path, count: int) -> Iterator[list[tuple[int, int, int]]]:
    """``count`` changeservers on ``dsn``, each its own slot and log: (pid, API port,
    management port) each. Marked down before they stop, so their slots go."""
    publication = f"bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE PUBLICATION {publication} FOR ALL TABLES")
    processes = []
    with contextlib.ExitStack() as exits:
        for i in range(count):
            folder = state / f"{publication}-{i}"
            folder.mkdir()
            slot = f"{publication}_{i}"
            process, api, mgmt = changeserver_process(
                dsn, folder, slot, "--publication", publication
            )
            exits.callback(process.stop)
            started = process.start().process
            assert started is not None
            processes.append((started.pid, api, mgmt))
        try:
            yield processes
        finally:
            for _, _, mgmt in processes:
                httpx.get(f"http://127.0.0.1:{mgmt}/markdown")


@contextlib.contextmanager
def _balancer(state: Path, servers: list[tuple[int, int, int]]) -> Iterator[LoadBalancer]:
    balancer = LoadBalancer(
        StateDir(state / "loadbalancer"),
        free_port(),
        [],
        changeserver_port=free_port(),
        changeservers=[(api, mgmt) for _, api, mgmt in servers],
    )
    balancer.start()
    try:
        wait_until(
            lambda: set(balancer.servers().values()) == {"UP"}, timeout=30, what="servers UP"
        )
        yield balancer
    finally:
        balancer.stop()


def _cpu(pids: list[int]) -> float:
    return sum(server_cpu(pid) for pid in pids)


def _settle_all(pids: list[int]) -> None:
    for pid in pids:
        settle(pid)


async def _round(
    port: int, server_pids: list[int], balancer_pid: int | None, dsn: str, clients: int
) -> tuple[list[float], float, float]:
    """Latencies, servers' and balancer's CPU seconds per response."""
    since = httpx.get(f"http://127.0.0.1:{port}/changes?selector=lp").json()["lastSequence"]
    watched = [*server_pids, *([balancer_pid] if balancer_pid else [])]
    group = Group(port, f"/changes?selector=lp&since={since}&block=300", clients)
    try:
        await group.open()
        await asyncio.to_thread(_settle_all, watched)
        servers_before = _cpu(server_pids)
        balancer_before = _cpu([balancer_pid]) if balancer_pid else 0.0
        with psycopg.connect(dsn) as conn, measuring():
            conn.execute("INSERT INTO items (name, _change_selector) VALUES ('wake', 'lp')")
            committing = time.perf_counter()
            conn.commit()
            await group.done
        await asyncio.to_thread(_settle_all, watched)
        servers = (_cpu(server_pids) - servers_before) / clients
        balancer = (_cpu([balancer_pid]) - balancer_before) / clients if balancer_pid else 0.0
    finally:
        group.close()
    bodies = [json.loads(poll.body()) for poll in group.polls]
    assert all(len(body["changes"]) == 1 for body in bodies), "a client missed the change"
    return [poll.answered_at - committing for poll in group.polls], servers, balancer


def _long_polls(dsn: str, state: Path) -> list[Figure]:
    figures: list[Figure] = []
    with _servers(dsn, state, 1) as [single]:
        alone = {c: asyncio.run(_round(single[1], [single[0]], None, dsn, c)) for c in CLIENTS}
    with _servers(dsn, state, 2) as pair, _balancer(state, pair) as balancer:
        balancer_pid = read_pid(balancer.pid_file)
        assert balancer_pid is not None
        port = balancer.changeserver_port
        assert port is not None
        most = max_connections() - 100
        behind = {
            c: asyncio.run(_round(port, [p for p, _, _ in pair], balancer_pid, dsn, min(c, most)))
            for c in CLIENTS
        }
    for clients in CLIENTS:
        one, one_cpu, _ = alone[clients]
        two, two_cpu, balancer_cpu = behind[clients]
        one_cuts, two_cuts = statistics.quantiles(one, n=100), statistics.quantiles(two, n=100)
        label = f"{len(two):,} clients" + ("" if len(two) == clients else " (the fd limit)")
        figures += [
            Figure(NAME, f"p50, two behind the balancer, {label}", two_cuts[49] * 1000, "ms",
                   baseline=one_cuts[49] * 1000, baseline_name=f"one alone, {clients:,}",
                   higher_is_better=False),
            Figure(NAME, f"p99, two behind the balancer, {label}", two_cuts[98] * 1000, "ms",
                   baseline=one_cuts[98] * 1000, baseline_name=f"one alone, {clients:,}",
                   higher_is_better=False),
            Figure(NAME, f"servers' CPU per response, two behind the balancer, {label}",
                   two_cpu * 1e6, "µs", baseline=one_cpu * 1e6,
                   baseline_name=f"one alone, {clients:,}", higher_is_better=False),
            Figure(NAME, f"balancer CPU per response, {label}", balancer_cpu * 1e6, "µs",
                   higher_is_better=False),
        ]  # fmt: skip
    return figures


def _walsenders(conn: psycopg.Connection, slots: list[str]) -> list[int]:
    rows = conn.execute(
        "SELECT active_pid FROM pg_replication_slots WHERE slot_name = ANY(%s)", (slots,)
    ).fetchall()
    return [int(pid) for (pid,) in rows if pid is not None]


def _per_slot(dsn: str, state: Path, slots: int) -> list[Figure]:
    """The burst with ``slots`` changeservers following it."""
    with _servers(dsn, state, slots) as servers, psycopg.connect(dsn, autocommit=True) as conn:
        names = [
            s["slot"]
            for s in (httpx.get(f"http://127.0.0.1:{m}/status").json() for _, _, m in servers)
        ]
        walsenders = _walsenders(conn, names)
        if len(walsenders) != slots or not Path(f"/proc/{walsenders[0]}").exists():
            raise RuntimeError(
                "Postgres must run on this machine: its walsenders are read in /proc"
            )
        backend = _number(conn, "SELECT pg_backend_pid()")
        senders_before, backend_before = _cpu(walsenders), _cpu([backend])
        retained: list[int] = []
        done = threading.Event()

        def sample() -> None:  # the most WAL the slots hold back while the burst streams
            while not done.wait(0.2):
                retained.append(_retained(conn_sampler, names))

        with psycopg.connect(dsn, autocommit=True) as conn_sampler:
            sampler = threading.Thread(target=sample)
            sampler.start()
            for _ in range(0, CHANGES, ROWS_PER_TRANSACTION):
                with conn.transaction():
                    conn.execute(
                        "INSERT INTO items (name, _change_selector)"
                        " SELECT 'burst', 'burst' FROM generate_series(1, %s)",
                        (ROWS_PER_TRANSACTION,),
                    )
            backend_cpu = _cpu([backend]) - backend_before
            conn.execute("INSERT INTO items (name, _change_selector) VALUES ('end', 'end')")
            # Each has the whole burst once it has the change after it.
            wait_until(
                lambda: all(_has_end(api) for _, api, _ in servers),
                timeout=600,
                what="every server caught up",
            )
            done.set()
            sampler.join()
        senders_cpu = _cpu(walsenders) - senders_before
    label = f"{slots} slot{'s' if slots > 1 else ''}"
    return [
        Figure(NAME, f"walsender CPU per change, each, {label}",
               senders_cpu / slots / CHANGES * 1e6, "µs", higher_is_better=False),
        Figure(NAME, f"walsenders' CPU per change, all, {label}",
               senders_cpu / CHANGES * 1e6, "µs", baseline=backend_cpu / CHANGES * 1e6,
               baseline_name="the writing backend", higher_is_better=False),
        Figure(NAME, f"most WAL held back per slot during the burst, {label}",
               max(retained, default=0) / slots / 1024 / 1024, "MiB", higher_is_better=False),
    ]  # fmt: skip


def _retained(conn: psycopg.Connection, slots: list[str]) -> int:
    row = conn.execute(
        "SELECT coalesce(sum(pg_current_wal_lsn() - restart_lsn), 0) FROM pg_replication_slots"
        " WHERE slot_name = ANY(%s)",
        (slots,),
    ).fetchone()
    return int(row[0]) if row else 0


def _has_end(port: int) -> bool:
    params: dict[str, str | int] = {"selector": "end", "block": 5}
    answer = httpx.get(f"http://127.0.0.1:{port}/changes", params=params, timeout=30).json()
    return bool(answer["changes"])


def _number(conn: psycopg.Connection, query: str) -> int:
    row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def main() -> int:
    figures: list[Figure] = []
    with (
        pg.scratch_database(pg_server_dsn(), "bench") as dsn,
        tempfile.TemporaryDirectory() as folder,
    ):
        state = Path(folder)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE items (id serial PRIMARY KEY, name text, _change_selector text)"
            )
        figures += _long_polls(dsn, state)
        for slots in SLOTS:
            figures += _per_slot(dsn, state, slots)
    report(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
