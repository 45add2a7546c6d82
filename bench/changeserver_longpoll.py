"""Long polling at scale: 1,000, 5,000 and 10,000 clients blocked on /changes, then one commit.

Every client blocks on the same selector (the worst case: one commit wakes all
of them); then, as a second figure, one client is woken per commit while all the
others stay blocked on another selector (the cost of idle waiters). Measured:
the time from issuing the commit to each client's complete response (p50, p99),
the changeserver's CPU time per woken response (steadier than latency on a
shared machine, where the clients' own loop competes for the same cores), the
clients' CPU time per response (their share of the same cores), and the
changeserver's resident memory per idle blocked client. The changeserver runs
as its own process; the clients share one event loop in this one. Baselines are
the goals (p99 <= 15 / 50 / 100 ms at 1,000 / 5,000 / 10,000 clients, <= 15 KB
per idle client), not another system.

    .venv/bin/python -m bench changeserver_longpoll
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psycopg

from bench.report import Figure, report
from bench.services import changeserver, pg_server_dsn, rss_bytes
from changebroker import pg

CLIENTS = (1_000, 5_000, 10_000)
P99_GOAL_MS = {1_000: 15.0, 5_000: 50.0, 10_000: 100.0}
MEMORY_GOAL_KB = 15.0
CONNECTING_AT_ONCE = 200  # below uvicorn's listen backlog
ONE_AMONG_IDLE_SAMPLES = 10


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _settle(pid: int) -> None:
    """Until the server has gone idle: every request read and its waiter registered."""
    previous = -1
    while (ticks := _cpu_ticks(pid)) != previous:
        previous = ticks
        time.sleep(0.5)


class _LongPoll(asyncio.Protocol):
    """One blocked GET, read as bytes arrive: a client this cheap lets the figures show the
    server (a stream reader per client cost more Python than the server's answer does)."""

    def __init__(self, request: bytes, answered: asyncio.Future[tuple[float, bytes]]) -> None:
        self.request = request
        self.answered = answered
        self.received = bytearray()
        self.start = self.end = 0  # where the body begins and ends, once the head is in

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.received += data
        if not self.end and (head_end := self.received.find(b"\r\n\r\n")) >= 0:
            head = bytes(self.received[:head_end]).lower()
            length = int(head.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
            self.start, self.end = head_end + 4, head_end + 4 + length
        if self.end and len(self.received) >= self.end and not self.answered.done():
            done = time.perf_counter()
            self.answered.set_result((done, bytes(self.received[self.start : self.end])))
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.answered.done():
            self.answered.set_exception(exc or ConnectionError("closed before the answer"))


async def _client(
    port: int, path: str, gate: asyncio.Semaphore, connected: list[int]
) -> tuple[float, bytes]:
    """(when the whole answer was in, its body)."""
    loop = asyncio.get_running_loop()
    answered: asyncio.Future[tuple[float, bytes]] = loop.create_future()
    request = f"GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n".encode()
    async with gate:
        await loop.create_connection(lambda: _LongPoll(request, answered), "127.0.0.1", port)
        connected[0] += 1
    return await answered


async def _round(
    port: int, pid: int, dsn: str, clients: int, since: str
) -> tuple[list[float], float, float, float, str]:
    """Latencies, memory per idle client, server and client CPU seconds per response, last
    sequence."""
    rss_before = rss_bytes(pid)
    gate = asyncio.Semaphore(CONNECTING_AT_ONCE)
    connected = [0]
    path = f"/changes?selector=lp&since={since}&block=300"
    tasks = [asyncio.create_task(_client(port, path, gate, connected)) for _ in range(clients)]
    while connected[0] < clients:
        await asyncio.sleep(0.05)
    await asyncio.to_thread(_settle, pid)
    per_client = (rss_bytes(pid) - rss_before) / clients
    ticks = _cpu_ticks(pid)
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO items (name, _change_selector) VALUES ('wake', 'lp')")
        client_cpu = time.process_time()
        committing = time.perf_counter()
        conn.commit()
    answers = await asyncio.gather(*tasks)
    client_per_response = (time.process_time() - client_cpu) / clients
    cpu_per_response = (_cpu_ticks(pid) - ticks) / os.sysconf("SC_CLK_TCK") / clients
    latencies = [done - committing for done, _ in answers]
    bodies = [json.loads(body) for _, body in answers]
    assert all(len(body["changes"]) == 1 for body in bodies), "a client missed the change"
    return latencies, per_client, cpu_per_response, client_per_response, bodies[0]["lastSequence"]


async def _one_among_idle(
    port: int, pid: int, dsn: str, clients: int, since: str
) -> tuple[list[float], str]:
    """One waiter woken per commit while ``clients - 1`` others stay blocked on another selector.

    The cost of a wake should not grow with the number of idle waiters.
    """
    gate = asyncio.Semaphore(CONNECTING_AT_ONCE)
    connected = [0]
    idle_path = f"/changes?selector=idle&since={since}&block=300"
    idle = [
        asyncio.create_task(_client(port, idle_path, gate, connected)) for _ in range(clients - 1)
    ]
    latencies: list[float] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(ONE_AMONG_IDLE_SAMPLES):
            path = f"/changes?selector=lp&since={since}&block=300"
            woken = asyncio.create_task(_client(port, path, gate, connected))
            while connected[0] < clients:
                await asyncio.sleep(0.05)
            await asyncio.to_thread(_settle, pid)  # every waiter registered before the commit
            committing = time.perf_counter()
            conn.execute("INSERT INTO items (name, _change_selector) VALUES ('wake', 'lp')")
            done, body = await woken
            latencies.append(done - committing)
            since = json.loads(body)["lastSequence"]
            connected[0] -= 1
        # Release the idle clients so every connection ends cleanly.
        conn.execute("INSERT INTO items (name, _change_selector) VALUES ('wake', 'idle')")
    answers = await asyncio.gather(*idle)
    return latencies, json.loads(answers[0][1])["lastSequence"]


def main() -> int:
    figures: list[Figure] = []
    with (
        pg.scratch_database(pg_server_dsn(), "bench") as dsn,
        tempfile.TemporaryDirectory() as state,
    ):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE items (id serial PRIMARY KEY, name text, _change_selector text)"
            )
        with changeserver(dsn, Path(state)) as (server_pid, port):
            since = httpx.get(f"http://127.0.0.1:{port}/changes?selector=lp").json()["lastSequence"]
            for clients in CLIENTS:
                latencies, per_client, cpu_per_response, client_cpu, since = asyncio.run(
                    _round(port, server_pid, dsn, clients, since)
                )
                cuts = statistics.quantiles(latencies, n=100)
                name = "changeserver_longpoll"
                figures += [
                    Figure(name, f"commit-to-response p50, {clients:,} clients",
                           cuts[49] * 1000, "ms", higher_is_better=False),
                    Figure(name, f"commit-to-response p99, {clients:,} clients",
                           cuts[98] * 1000, "ms", baseline=P99_GOAL_MS[clients],
                           baseline_name="goal", higher_is_better=False),
                    Figure(name, f"server CPU per woken response, {clients:,} clients",
                           cpu_per_response * 1e6, "µs", higher_is_better=False),
                    Figure(name, f"client CPU per response, {clients:,} clients",
                           client_cpu * 1e6, "µs", higher_is_better=False),
                    Figure(name, f"memory per idle client, {clients:,} clients",
                           per_client / 1024, "KB", baseline=MEMORY_GOAL_KB, baseline_name="goal",
                           higher_is_better=False),
                ]  # fmt: skip
                woken_alone, since = asyncio.run(
                    _one_among_idle(port, server_pid, dsn, clients, since)
                )
                figures += [
                    Figure(name, f"one woken among {clients:,} blocked, median",
                           statistics.median(woken_alone) * 1000, "ms", baseline=25.0,
                           baseline_name="goal", higher_is_better=False),
                    Figure(name, f"one woken among {clients:,} blocked, worst of "
                           f"{ONE_AMONG_IDLE_SAMPLES}", max(woken_alone) * 1000, "ms",
                           baseline=25.0, baseline_name="goal", higher_is_better=False),
                ]  # fmt: skip
    report(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
