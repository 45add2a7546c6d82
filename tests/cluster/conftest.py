"""One three-node Kafka cluster for the module, and per test the whole path on it: a
changeserver on the test's database, a registry, two broker processes behind HAProxy (the
bridge and every client go through it), all on a metadata database of the test's own."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from changebroker import pg
from changebroker.stack.kafka import LocalKafkaCluster
from changebroker.stack.local import LocalStack
from changebroker.stack.processes import wait_until
from changebroker.stack.run import serve_in_thread
from changeserver.server import ChangeServer
from changeserver.server import Settings as ChangeServerSettings
from registry.app import create_app as registry_app
from tests.support.bridge_stack import Stack
from tests.support.cluster import BrokerFleet, broker_fleet, local_cluster_stack


@pytest.fixture(scope="module")
def cluster_up(
    tmp_path_factory: pytest.TempPathFactory, pg_server_dsn: str
) -> Iterator[LocalStack]:
    """What ``changebroker up --kafka-nodes 3`` starts of Kafka, once for the module."""
    with local_cluster_stack(tmp_path_factory.mktemp("kafka-cluster"), pg_server_dsn) as stack:
        yield stack


@pytest.fixture(scope="module")
def cluster(cluster_up: LocalStack) -> LocalKafkaCluster:
    return cluster_up.kafka


@dataclass
class ClusterStack:
    stack: Stack  # the bridge's view: its broker_url is the load balancer
    fleet: BrokerFleet
    cluster: LocalKafkaCluster
    up: LocalStack  # what started the cluster: its status lists the nodes


@pytest.fixture
def cluster_stack(
    cluster_up: LocalStack,
    cluster: LocalKafkaCluster,
    pg_dsn: str,
    pg_server_dsn: str,
    tmp_path: Path,
    unique_name: Callable[[str], str],
) -> Iterator[ClusterStack]:
    with contextlib.ExitStack() as exits:
        meta_dsn = exits.enter_context(pg.scratch_database(pg_server_dsn, "t_meta"))
        slot = unique_name("bridge")
        snapshots_dir = tmp_path / f"{slot}-snapshots"
        changeserver = ChangeServer(
            ChangeServerSettings(
                dsn=pg_dsn, slot=slot, db_dir=tmp_path / slot, snapshots_dir=snapshots_dir
            )
        )
        changeserver_url = exits.enter_context(serve_in_thread(changeserver.api_app))
        wait_until(changeserver.replicator.streaming.is_set, timeout=30, what="replication")
        registry_url = exits.enter_context(serve_in_thread(registry_app(meta_dsn)))
        fleet = exits.enter_context(
            broker_fleet(meta_dsn, cluster.bootstrap, registry_url, tmp_path)
        )
        stack = Stack(
            app_dsn=pg_dsn,
            meta_dsn=meta_dsn,
            kafka_bootstrap=cluster.bootstrap,
            changeserver_url=changeserver_url,
            broker_url=fleet.url,
            registry_url=registry_url,
            prefix=unique_name("cdc"),
            tmp=tmp_path,
            snapshots_dir=snapshots_dir,
            publication=slot,
        )
        yield ClusterStack(stack, fleet, cluster, cluster_up)
