"""A broker app served in a thread for a test, with the settings it needs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx

from changebroker import pg
from changebroker.broker.app import create_app
from changebroker.broker.settings import Settings
from changebroker.stack.run import serve_in_thread


@contextlib.contextmanager
def broker_client(settings: Settings) -> Iterator[httpx.Client]:
    """A client of a broker serving with ``settings`` (a second one on a database another
    broker migrated, or one whose settings differ)."""
    with (
        serve_in_thread(create_app(settings)) as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        yield client


@contextlib.contextmanager
def scratch_broker(pg_server_dsn: str, kafka_bootstrap: str) -> Iterator[str]:
    """A broker served in a thread on a metadata database of its own (dropped afterwards);
    its base URL."""
    with pg.scratch_database(pg_server_dsn, "t_broker") as dsn:
        settings = Settings(pg_dsn=dsn, kafka_bootstrap=kafka_bootstrap)
        with serve_in_thread(create_app(settings)) as url:
            yield url
