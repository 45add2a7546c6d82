"""Where a benchmark's Postgres and Kafka are: the local stack's, the one ``python -m bench``
starts; ``CHANGEBROKER_PG_DSN`` and ``CHANGEBROKER_KAFKA_BOOTSTRAP`` name others."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from changebroker import pg
from changebroker.cli import stack_from_env
from changebroker.stack.local import LocalStack
from changebroker.stack.run import broker_process


def rss_bytes(pid: int) -> int:
    """The resident memory of process ``pid`` (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


def server_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its children (the workers) so far: steadier than rates on
    a shared machine."""
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        pids += [int(child) for child in (task / "children").read_text().split()]
    ticks = 0
    for each in pids:
        fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime + stime
    return ticks / os.sysconf("SC_CLK_TCK")


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
