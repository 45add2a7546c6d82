"""One three-node Kafka cluster for the module, and per test the whole path on it
(:func:`tests.support.cluster.cluster_path`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from changebroker.stack.local import LocalStack
from tests.support.cluster import ClusterStack, cluster_path, local_cluster_stack


@pytest.fixture(scope="module")
def cluster_up(
    tmp_path_factory: pytest.TempPathFactory, pg_server_dsn: str
) -> Iterator[LocalStack]:
    """What ``changebroker up --kafka-nodes 3`` starts of Kafka, once for the module."""
    with local_cluster_stack(tmp_path_factory.mktemp("kafka-cluster"), pg_server_dsn) as stack:
        yield stack


@pytest.fixture
def cluster_stack(
    cluster_up: LocalStack,
    pg_dsn: str,
    pg_server_dsn: str,
    tmp_path: Path,
    unique_name: Callable[[str], str],
) -> Iterator[ClusterStack]:
    slot, prefix = unique_name("bridge"), unique_name("cdc")
    with cluster_path(cluster_up, pg_dsn, pg_server_dsn, tmp_path, slot, prefix) as path:
        yield path
