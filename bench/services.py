"""Where a benchmark's Postgres and Kafka are: the local stack's, the one ``python -m bench``
starts; ``CHANGEBROKER_PG_DSN`` and ``CHANGEBROKER_KAFKA_BOOTSTRAP`` name others."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from changebroker import pg
from changebroker.cli import stack_from_env
from changebroker.stack.local import LocalStack
from changebroker.stack.run import broker_process, changeserver_process


def rss_bytes(pid: int) -> int:
    """The resident memory of process ``pid`` (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


def server_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its children (the workers, Postgres's backends), the ones
    that ended too, so far: steadier than rates on a shared machine."""
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            pids += [int(child) for child in (task / "children").read_text().split()]
    ticks = 0
    for each in pids:
        with contextlib.suppress(OSError):  # a child that ended meanwhile: counted below
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime + stime
            if each == pid:
                ticks += int(fields[13]) + int(fields[14])  # cutime + cstime: children reaped
    return ticks / os.sysconf("SC_CLK_TCK")


def listening_pid(port: int) -> int:
    """The process listening on TCP ``port`` of this machine (Linux): how a benchmark finds
    the Postgres or Kafka it was given by address, to read their CPU too."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        with contextlib.suppress(OSError):
            for fd in fd_dir.iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in inodes:
                        return int(fd_dir.parent.name)
    raise LookupError(f"no process of this machine listens on port {port}")


def machine_busy_cpu() -> float:
    """CPU seconds every core of the machine has spent busy so far (all processes, the
    kernel's interrupt work too): what a benchmark of several processes shares out."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def local_stack() -> LocalStack:
    return stack_from_env()


def pg_server_dsn() -> str:
    """A DSN of the Postgres server benchmarks make their scratch databases on."""
    return local_stack().pg_dsn


def kafka_bootstrap() -> str:
    return local_stack().kafka_bootstrap


@contextlib.contextmanager
def app_and_meta_databases() -> Iterator[tuple[str, str]]:
    """Scratch databases for application tables and for broker and registry metadata (kept
    apart, as the stack keeps them), dropped afterwards."""
    server_dsn = pg_server_dsn()
    with (
        pg.scratch_database(server_dsn, "bench") as app_dsn,
        pg.scratch_database(server_dsn, "bench_meta") as meta_dsn,
    ):
        yield app_dsn, meta_dsn


@contextlib.contextmanager
def broker(label: str, *args: str, bootstrap: str | None = None) -> Iterator[tuple[str, str]]:
    """A ``changebroker broker`` process on a metadata database of its own, on ``bootstrap``
    (default: the runner's Kafka); its URL and that database's DSN. The process and the
    database are gone afterwards."""
    log = Path(tempfile.mkstemp(prefix=f"bench-{label}-", suffix=".log")[1])
    with pg.scratch_database(pg_server_dsn(), f"bench_{label}") as meta_dsn:
        process, url = broker_process(meta_dsn, bootstrap or kafka_bootstrap(), log, *args)
        process.start()
        try:
            yield url, meta_dsn
        finally:
            process.stop()


@contextlib.contextmanager
def changeserver(dsn: str, state: Path) -> Iterator[tuple[int, int]]:
    """A ``changebroker changeserver`` process on ``dsn`` with a replication slot of its own,
    its log under ``state``; its pid and API port. Once the work is done it is marked down
    before it stops, so it drops its slot (a slot left behind holds the server's WAL)."""
    process, port, mgmt = changeserver_process(dsn, state, f"bench_{uuid.uuid4().hex[:8]}")
    started = process.start().process
    assert started is not None
    try:
        yield started.pid, port
        httpx.get(f"http://127.0.0.1:{mgmt}/markdown")
    finally:
        process.stop()


def create_event_type(url: str, name: str, partitions: int, **fields: Any) -> None:
    """An event type ``name`` owned by "bench" with ``partitions`` partitions and ``fields``
    (category, partitioning, schema, ...)."""
    statistic = {
        "messages_per_minute": 1,
        "message_size": 1,
        "read_parallelism": partitions,
        "write_parallelism": 1,
    }
    body = {"name": name, "owning_application": "bench", "default_statistic": statistic, **fields}
    httpx.post(f"{url}/event-types", json=body, timeout=60).raise_for_status()


def http_request(method: str, path: str, body: bytes = b"", content_type: str = "") -> bytes:
    """One HTTP/1.1 request's bytes, as :func:`keep_alive_fleet` sends them."""
    head = f"{method} {path} HTTP/1.1\r\nHost: bench\r\n"
    if content_type:
        head += f"Content-Type: {content_type}\r\n"
    if body:
        head += f"Content-Length: {len(body)}\r\n"
    return (head + "\r\n").encode() + body


def keep_alive_fleet(
    port: int, request: bytes | Callable[[], bytes], connections: int, seconds: float
) -> tuple[float, list[float]]:
    """(answers/s, each answer's latency in s) of ``connections`` keep-alive connections,
    each sending ``request`` (or what ``request()`` makes, a new one each time) and awaiting
    its whole answer (a ``200``) for ``seconds``.

    The clients are one asyncio loop reading bytes: on a two-core machine shared with the
    server, a client that parses headers into objects (httpx) costs more CPU per request
    than the server does, and the figure would be the client's."""
    latencies: list[float] = []

    async def connection(deadline: float) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.monotonic() < deadline:
                started = time.perf_counter()
                writer.write(request() if callable(request) else request)
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                answer = await reader.readexactly(length)
                if not head.startswith(b"HTTP/1.1 200"):
                    raise RuntimeError(f"answered {head[:12]!r}: {answer[:300]!r}")
                latencies.append(time.perf_counter() - started)
        finally:
            writer.close()

    async def fleet() -> float:
        started = time.monotonic()
        await asyncio.gather(*(connection(started + seconds) for _ in range(connections)))
        return len(latencies) / (time.monotonic() - started)

    return asyncio.run(fleet()), latencies
