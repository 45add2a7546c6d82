"""One registry database and server per test module: tests use unique subject names."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from changebroker import pg
from changebroker.registry.app import create_app
from changebroker.stack.run import serve_in_thread


@pytest.fixture(scope="module")
def registry_dsn(pg_server_dsn: str) -> Iterator[str]:
    """A database of the module's own, dropped afterwards."""
    with pg.scratch_database(pg_server_dsn, "t_registry") as dsn:
        yield dsn


@pytest.fixture(scope="module")
def registry_url(registry_dsn: str) -> Iterator[str]:
    with serve_in_thread(create_app(registry_dsn, statement_timeout_ms=5_000)) as url:
        yield url


@pytest.fixture(scope="module")
def client(registry_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=registry_url, timeout=30) as http:
        yield http
