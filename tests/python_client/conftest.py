"""The client tests' fixtures: changeservers and a broker in this process (tests/support/)."""

from collections.abc import Iterator

import pytest

from tests.support.brokers import scratch_broker
from tests.support.changeserver import cs, make_server

__all__ = ["broker_url", "cs", "make_server"]


@pytest.fixture(scope="module")
def broker_url(pg_server_dsn: str, kafka_bootstrap: str) -> Iterator[str]:
    with scratch_broker(pg_server_dsn, kafka_bootstrap) as url:
        yield url
