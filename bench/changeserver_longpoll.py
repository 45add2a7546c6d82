"""Long polling at scale: 1,000, 5,000 and 10,000 clients blocked on /changes, then one commit.

Every client blocks on the same selector (the worst case: one commit wakes all
of them); then, as a second figure, one client is woken per commit while all the
others stay blocked on another selector (the cost of idle waiters). Measured:
the time from issuing the commit to each client's complete response (p50, p99),
the changeserver's CPU time per woken response, from the commit until it is idle
again (steadier than latency on a shared machine, where the clients' own loop
competes for the same cores; it includes what follows the answers: each request's
end, its log line, its connection's close), the
clients' CPU time per response (their share of the same cores), and the
changeserver's resident memory per idle blocked client. The changeserver runs
as its own process; the clients share one event loop in this one. Baselines are
the goals (p99 <= 15 / 50 / 100 ms at 1,000 / 5,000 / 10,000 clients, <= 15 KB
per idle client) and, for the p99, a bare server measured in the same run: an
asyncio server in a process of its own that holds the same clients' requests
and, when told, writes each the changeserver's own answer (the same bytes) in
one pass and then closes them, with no HTTP parsing, routing or logging. It is
what one process's answers cost on this machine whatever serves them: the
kernel's loopback send is charged to the sender. Then two such servers in two
processes, each holding half the clients and told to answer at once: what a
process per core could do at best, where the clients share the same cores.

    .venv/bin/python -m bench changeserver_longpoll
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import httpx
import psycopg

from bench.report import Figure, report
from bench.services import changeserver, pg_server_dsn, rss_bytes, server_cpu
from changebroker import pg

CLIENTS = (1_000, 5_000, 10_000)
P99_GOAL_MS = {1_000: 15.0, 5_000: 50.0, 10_000: 100.0}
MEMORY_GOAL_KB = 15.0
CONNECTING_AT_ONCE = 200  # below uvicorn's listen backlog
ONE_AMONG_IDLE_SAMPLES = 10


def settle(pid: int) -> None:
    """Until the server has gone idle: every request read and its waiter registered."""
    previous = -1.0
    while (cpu := server_cpu(pid)) != previous:
        previous = cpu
        time.sleep(0.5)


class _LongPoll(asyncio.Protocol):
    """One blocked GET, read as bytes arrive. The clients' own cost is counted against the
    server's latency on a machine they share, so this one does the least a client can: no
    future or task per client, and no close until the whole round is answered."""

    def __init__(self, request: bytes, group: Group) -> None:
        self.request = request
        self.group = group
        self.received = bytearray()
        self.end = 0  # where the body ends, once the head is in
        self.answered_at = 0.0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.received += data
        if not self.end and (head_end := self.received.find(b"\r\n\r\n")) >= 0:
            head = bytes(self.received[:head_end]).lower()
            length = int(head.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
            self.end = head_end + 4 + length
        if self.end and len(self.received) >= self.end and not self.answered_at:
            self.answered_at = time.perf_counter()
            self.group.answered()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.answered_at:
            self.group.fail(exc or ConnectionError("closed before the answer"))

    def body(self) -> bytes:
        return bytes(self.received[self.received.find(b"\r\n\r\n") + 4 : self.end])

    def answer(self) -> bytes:
        return bytes(self.received[: self.end])


class Group:
    """Long polls sent together: done once every one has its whole answer."""

    def __init__(self, port: int, path: str, clients: int) -> None:
        self.port = port
        self.request = f"GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n".encode()
        self.clients = clients
        self.polls: list[_LongPoll] = []
        self.answers = 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def open(self) -> None:
        """Every client connected and its request sent."""
        loop = asyncio.get_running_loop()
        gate = asyncio.Semaphore(CONNECTING_AT_ONCE)

        async def one() -> None:
            async with gate:
                poll = _LongPoll(self.request, self)
                await loop.create_connection(lambda: poll, "127.0.0.1", self.port)
                self.polls.append(poll)

        await asyncio.gather(*(one() for _ in range(self.clients)))

    def answered(self) -> None:
        self.answers += 1
        if self.answers == len(self.polls) and not self.done.done():
            self.done.set_result(None)

    def fail(self, error: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(error)

    def close(self) -> None:
        for poll in self.polls:
            if poll.transport is not None:
                poll.transport.close()


async def _round(
    port: int, pid: int, dsn: str, clients: int, since: str
) -> tuple[list[float], float, float, float, bytes, str]:
    """Latencies, memory per idle client, server and client CPU seconds per response, one
    client's whole answer, last sequence."""
    rss_before = rss_bytes(pid)
    group = Group(port, f"/changes?selector=lp&since={since}&block=300", clients)
    try:
        await group.open()
        await asyncio.to_thread(settle, pid)
        per_client = (rss_bytes(pid) - rss_before) / clients
        cpu = server_cpu(pid)
        with psycopg.connect(dsn) as conn, measuring():
            conn.execute("INSERT INTO items (name, _change_selector) VALUES ('wake', 'lp')")
            client_cpu = time.process_time()
            committing = time.perf_counter()
            conn.commit()
            await group.done
            client_per_response = (time.process_time() - client_cpu) / clients
        await asyncio.to_thread(settle, pid)  # what the server does after the answers counts
        cpu_per_response = (server_cpu(pid) - cpu) / clients
    finally:
        group.close()
    latencies = [poll.answered_at - committing for poll in group.polls]
    bodies = [json.loads(poll.body()) for poll in group.polls]
    assert all(len(body["changes"]) == 1 for body in bodies), "a client missed the change"
    return (
        latencies,
        per_client,
        cpu_per_response,
        client_per_response,
        group.polls[0].answer(),
        bodies[0]["lastSequence"],
    )


class _Held(asyncio.Protocol):
    """The bare server's side of one client: its request read, it waits for the pass."""

    def __init__(self, server: _BareServer) -> None:
        self.server = server
        self.head = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.head += data
        if b"\r\n\r\n" in self.head:
            self.server.hold(self.transport)


class _BareServer:
    """The baseline's server, run in a process of its own; told over ``control`` how many
    requests to wait for (it answers once they are all in) and when to answer them."""

    def __init__(self, control: Connection) -> None:
        self.control = control
        self.held: list[asyncio.Transport] = []
        self.expected = 0
        self.answer = b""

    def hold(self, transport: asyncio.Transport) -> None:
        self.held.append(transport)
        if len(self.held) == self.expected:
            self.control.send("held")

    def on_control(self) -> None:
        command, argument = self.control.recv()
        if command == "expect":
            self.expected, self.answer = argument
        elif command == "answer":
            for transport in self.held:
                transport.write(self.answer)
            for transport in self.held:
                transport.close()
            self.held = []

    async def serve(self, stopped: asyncio.Future[None]) -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Held(self), "127.0.0.1", 0, backlog=2048)
        self.control.send(server.sockets[0].getsockname()[1])
        loop.add_reader(self.control.fileno(), self.on_control)
        await stopped


def _bare_server(control: Connection) -> None:
    async def run() -> None:
        await _BareServer(control).serve(asyncio.get_running_loop().create_future())

    asyncio.run(run())


async def _bare_round(
    servers: list[tuple[int, Connection]], clients: int, answer: bytes
) -> list[float]:
    """Latencies of ``clients`` held by the bare ``servers`` (port, control), an equal share
    each, every one sent ``answer`` in one pass once all are told to answer."""
    share = clients // len(servers)
    groups = [Group(port, "/changes?selector=lp&block=300", share) for port, _ in servers]
    for _, control in servers:
        control.send(("expect", (share, answer)))
    try:
        for group in groups:
            await group.open()
        for _, control in servers:
            await asyncio.to_thread(control.recv)  # every request held
        with measuring():
            answering = time.perf_counter()
            for _, control in servers:
                control.send(("answer", None))
            await asyncio.gather(*(group.done for group in groups))
    finally:
        for group in groups:
            group.close()
    polls = [poll for group in groups for poll in group.polls]
    assert all(poll.answer() == answer for poll in polls)
    return [poll.answered_at - answering for poll in polls]


@contextlib.contextmanager
def _bare_server_process() -> Iterator[tuple[int, Connection]]:
    """The bare server's port and control connection."""
    ours, theirs = multiprocessing.Pipe()
    process = multiprocessing.get_context("spawn").Process(target=_bare_server, args=(theirs,))
    process.start()
    try:
        yield ours.recv(), ours
    finally:
        process.kill()
        process.join()


@contextlib.contextmanager
def measuring() -> Iterator[None]:
    """The clients' garbage collector off while answers arrive: a full collection of their
    thousands of connections would be counted as the server's latency."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def _one_among_idle(
    port: int, pid: int, dsn: str, clients: int, since: str
) -> tuple[list[float], str]:
    """One waiter woken per commit while ``clients - 1`` others stay blocked on another selector.

    The cost of a wake should not grow with the number of idle waiters.
    """
    idle = Group(port, f"/changes?selector=idle&since={since}&block=300", clients - 1)
    latencies: list[float] = []
    try:
        await idle.open()
        with psycopg.connect(dsn, autocommit=True) as conn:
            for _ in range(ONE_AMONG_IDLE_SAMPLES):
                woken = Group(port, f"/changes?selector=lp&since={since}&block=300", 1)
                try:
                    await woken.open()
                    await asyncio.to_thread(settle, pid)  # every waiter registered first
                    with measuring():
                        committing = time.perf_counter()
                        conn.execute(
                            "INSERT INTO items (name, _change_selector) VALUES ('wake', 'lp')"
                        )
                        await woken.done
                finally:
                    woken.close()
                [poll] = woken.polls
                latencies.append(poll.answered_at - committing)
                since = json.loads(poll.body())["lastSequence"]
            # Release the idle clients so every connection ends cleanly.
            conn.execute("INSERT INTO items (name, _change_selector) VALUES ('wake', 'idle')")
            await idle.done
    finally:
        idle.close()
    return latencies, json.loads(idle.polls[0].body())["lastSequence"]


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
        with (
            changeserver(dsn, Path(state)) as (server_pid, port),
            _bare_server_process() as first_bare,
            _bare_server_process() as second_bare,
        ):
            since = httpx.get(f"http://127.0.0.1:{port}/changes?selector=lp").json()["lastSequence"]
            for clients in CLIENTS:
                latencies, per_client, cpu_per_response, client_cpu, answer, since = asyncio.run(
                    _round(port, server_pid, dsn, clients, since)
                )
                cuts = statistics.quantiles(latencies, n=100)
                bare = statistics.quantiles(
                    asyncio.run(_bare_round([first_bare], clients, answer)), n=100
                )
                bare_pair = statistics.quantiles(
                    asyncio.run(_bare_round([first_bare, second_bare], clients, answer)), n=100
                )
                name = "changeserver_longpoll"
                figures += [
                    Figure(name, f"commit-to-response p50, {clients:,} clients",
                           cuts[49] * 1000, "ms", baseline=bare[49] * 1000,
                           baseline_name="bare server", higher_is_better=False),
                    Figure(name, f"commit-to-response p99, {clients:,} clients",
                           cuts[98] * 1000, "ms", baseline=P99_GOAL_MS[clients],
                           baseline_name="goal", higher_is_better=False),
                    Figure(name, f"commit-to-response p99 vs a bare server, {clients:,} clients",
                           cuts[98] * 1000, "ms", baseline=bare[98] * 1000,
                           baseline_name="bare server", higher_is_better=False),
                    Figure(name, f"commit-to-response p99 vs two bare servers, {clients:,} clients",
                           cuts[98] * 1000, "ms", baseline=bare_pair[98] * 1000,
                           baseline_name="two bare servers, half each", higher_is_better=False),
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
