"""One registry database and server per test module: tests use unique subject names."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from changebroker import pg
from registry.app import create_app
from tests.support.apps import serve_in_thread


@pytest.fixture(scope="module")
def registry_dsn(pg_server_dsn: str) -> Iterator[str]:
    """A database of the module's own, dropped afterwards."""
    name = f"t_registry_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg.with_database(pg_server_dsn, name)
    finally:
        with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def registry_url(registry_dsn: str) -> Iterator[str]:
    with serve_in_thread(create_app(registry_dsn, statement_timeout_ms=5_000)) as url:
        yield url
