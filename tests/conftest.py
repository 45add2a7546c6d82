"""Session-scoped real services, and per-test isolation on top of them.

``services`` comes from tests/support/services.py (external, testcontainers,
or the project's own local stack). Each test that asks for ``pg_dsn`` gets a
fresh database of its own; ``unique_name`` gives topic, slot and event type
names no other test uses.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import psycopg
import pytest

from changebroker import pg
from changebroker.stack.processes import wait_until
from tests.support.services import Services, test_services

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark(services: Services) -> Iterator[SparkSession]:
    """One local SparkSession (with the Kafka connector) for the whole run."""
    from changebroker.replay.spark import spark_session

    session = spark_session(app_name="changebroker-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def services() -> Iterator[Services]:
    with test_services() as found:
        yield found


@pytest.fixture(scope="session")
def kafka_bootstrap(services: Services) -> str:
    return services.kafka_bootstrap


@pytest.fixture(scope="session")
def pg_server_dsn(services: Services) -> str:
    """Superuser DSN to the server's maintenance database; prefer ``pg_dsn``."""
    return services.pg_dsn


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``unique_name("orders")`` -> ``orders_3f9a1c2b``: lowercase, safe for topics, slots, DBs."""
    token = uuid.uuid4().hex[:8]

    def make(prefix: str) -> str:
        return f"{prefix}_{token}"

    return make


@pytest.fixture
def pg_dsn(pg_server_dsn: str) -> Iterator[str]:
    """A fresh database for this test alone; dropped (with its slots) afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg.with_database(pg_server_dsn, name)
    finally:
        with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
            _drop_slots(conn, name)
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def _drop_slots(conn: psycopg.Connection, database: str) -> None:
    """A database with replication slots cannot be dropped: end their readers, drop them."""
    query = "SELECT slot_name FROM pg_replication_slots WHERE database = %s"
    for (slot,) in conn.execute(query, (database,)).fetchall():
        conn.execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
            " WHERE slot_name = %s AND active_pid IS NOT NULL",
            (slot,),
        )

        def released(slot: str = slot) -> bool:
            active = "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s AND active"
            return conn.execute(active, (slot,)).fetchone() == (0,)

        wait_until(released, timeout=30, what=f"slot {slot} to be released")
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
