"""One broker (app + metadata database) per test module: tests use unique event type names.

``broker_url`` is the base URL of a broker served in a thread; ``make_event_type``
creates an event type through the API and returns its name; ``nakadi_test_profile`` is a client
of a second broker on the same database with the settings of Nakadi's acceptance-test profile;
``administered`` one checking tokens, with an administrator and a caller who is not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from changebroker import pg
from changebroker.auth import AuthSettings
from changebroker.broker.app import create_app
from changebroker.broker.settings import Settings
from changebroker.stack.run import serve_in_thread
from tests.support.brokers import broker_client
from tests.support.credentials import tokens_file
from tests.support.event_types import business_event_type

# Every scope Nakadi names: who holds them all may still not be an administrator.
NAKADI_SCOPES = [
    "nakadi.config.write",
    "nakadi.event_type.write",
    "nakadi.event_stream.write",
    "nakadi.event_stream.read",
]


@pytest.fixture(scope="module")
def broker_dsn(pg_server_dsn: str) -> Iterator[str]:
    """A metadata database of the module's own, dropped afterwards."""
    with pg.scratch_database(pg_server_dsn, "t_broker") as dsn:
        yield dsn


@pytest.fixture(scope="module")
def broker_url(broker_dsn: str, kafka_bootstrap: str) -> Iterator[str]:
    settings = Settings(pg_dsn=broker_dsn, kafka_bootstrap=kafka_bootstrap, max_partitions=12)
    with serve_in_thread(create_app(settings)) as url:
        yield url


@pytest.fixture(scope="module")
def client(broker_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker_url, timeout=60) as http:
        yield http


@pytest.fixture
def make_event_type(client: httpx.Client, unique_name: Callable[[str], str]) -> Callable[..., str]:
    """``make_event_type(partition_strategy="random")`` -> the name of a new business type."""
    counter = iter(range(1000))

    def make(**overrides: Any) -> str:
        name = f"{unique_name('orders')}.t{next(counter)}"
        response = client.post("/event-types", json=business_event_type(name, **overrides))
        assert response.status_code == 201, response.text
        return name

    return make


@pytest.fixture(scope="module")
def nakadi_test_profile(
    broker_dsn: str, kafka_bootstrap: str, broker_url: str
) -> Iterator[httpx.Client]:
    """A broker on the module's database (``broker_url`` migrated it) with the settings of
    Nakadi's acceptance-test profile: commit timeout 5 s, 10,000 bytes of events per stream, 30
    partitions per subscription."""
    settings = Settings(
        pg_dsn=broker_dsn,
        kafka_bootstrap=kafka_bootstrap,
        max_commit_timeout=5.0,
        stream_memory_limit=10_000,
        subscription_max_partitions=30,
    )
    with broker_client(settings) as client:
        yield client


@pytest.fixture(scope="module")
def administered(
    broker_dsn: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[httpx.Client]:
    """A broker on the module's database checking tokens: ``ops`` is its administrator,
    ``shop`` is not; both hold every Nakadi scope (send ``Authorization: Bearer <name>``)."""
    tokens = tokens_file(
        tmp_path_factory.mktemp("auth") / "tokens.json",
        {"ops": ("ops", NAKADI_SCOPES), "shop": ("shop", NAKADI_SCOPES)},
    )
    auth = AuthSettings(mode="tokens", tokens_file=tokens, admins=("ops",))
    settings = Settings(pg_dsn=broker_dsn, kafka_bootstrap=kafka_bootstrap, auth=auth)
    with broker_client(settings) as client:
        yield client
