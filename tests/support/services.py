"""Where the tests' real Postgres and Kafka come from, in this order:

1. external, from CHANGEBROKER_TEST_PG_DSN / CHANGEBROKER_TEST_KAFKA_BOOTSTRAP;
2. testcontainers, when a Docker engine answers;
3. the project's own local stack (``changebroker.stack``), in ``.state/test``
   on free ports, stopped when the session ends.

The fixtures in ``tests/conftest.py`` hand out the same objects whichever is used.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from changebroker.stack.local import LocalStack, Ports
from changebroker.stack.processes import free_port, pid_alive
from changebroker.state import StateDir
from tests.support import REPO_ROOT


@dataclass(frozen=True)
class Services:
    pg_dsn: str  # a superuser DSN to the server's maintenance database
    kafka_bootstrap: str
    origin: str  # "external" | "testcontainers" | "local"


def docker_answers() -> bool:
    try:
        from testcontainers.core.docker_client import DockerClient

        DockerClient().client.ping()
        return True
    except Exception:
        return False


@contextlib.contextmanager
def _from_testcontainers() -> Iterator[Services]:
    from testcontainers.kafka import KafkaContainer
    from testcontainers.postgres import PostgresContainer

    postgres = PostgresContainer("postgres:16", driver=None).with_command(
        "postgres -c wal_level=logical -c max_replication_slots=64 -c max_wal_senders=64"
        " -c max_connections=300"
    )
    kafka = KafkaContainer("apache/kafka:4.2.0").with_kraft()
    with postgres, kafka:
        yield Services(
            postgres.get_connection_url(), kafka.get_bootstrap_server(), "testcontainers"
        )


TEST_STATE_ROOT = REPO_ROOT / ".state" / "test"
CACHE = REPO_ROOT / ".state" / "cache"


def _test_stack(root: Path) -> LocalStack:
    return LocalStack(
        state=StateDir(root, cache_root=CACHE),
        ports=Ports(postgres=free_port(), kafka=free_port(), kafka_controller=free_port()),
        durable=False,
    )


def _clean_up_killed_runs() -> None:
    """Stop and delete the stacks of earlier test runs that were killed before cleaning up."""
    for root in TEST_STATE_ROOT.glob("run-*"):
        owner = int(root.name.removeprefix("run-"))
        if not pid_alive(owner):
            _test_stack(root).down(purge=True)
            shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def _from_local_stack() -> Iterator[Services]:
    # One folder per run, so concurrent runs (two checkouts, two terminals) never collide.
    _clean_up_killed_runs()
    root = TEST_STATE_ROOT / f"run-{os.getpid()}"
    stack = _test_stack(root)
    stack.up(with_services=False)
    try:
        yield Services(
            pg_dsn=stack.pg_dsn.rsplit("/", 1)[0] + "/postgres",
            kafka_bootstrap=stack.kafka_bootstrap,
            origin="local",
        )
    finally:
        stack.down(purge=True)
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def test_services() -> Iterator[Services]:
    pg = os.environ.get("CHANGEBROKER_TEST_PG_DSN")
    kafka = os.environ.get("CHANGEBROKER_TEST_KAFKA_BOOTSTRAP")
    if pg and kafka:
        yield Services(pg, kafka, "external")
    elif docker_answers():
        with _from_testcontainers() as services:
            yield services
    else:
        with _from_local_stack() as services:
            yield services
