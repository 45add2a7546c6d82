"""A three-node local Kafka cluster, and broker processes behind HAProxy, for the tests that
take nodes and processes away under load (the same code ``changebroker up --kafka-nodes 3
--broker-processes 2`` runs); :func:`cluster_path` puts the whole path on such a cluster."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from changebroker import kafka, pg
from changebroker.changeserver.server import ChangeServer
from changebroker.changeserver.server import Settings as ChangeServerSettings
from changebroker.registry.app import create_app as registry_app
from changebroker.stack.kafka import LocalKafkaCluster
from changebroker.stack.loadbalancer import LoadBalancer
from changebroker.stack.local import LocalStack, Ports
from changebroker.stack.processes import free_port, free_port_run, pid_alive, wait_until
from changebroker.stack.run import CliProcess, broker_process, serve_in_thread
from changebroker.state import StateDir
from tests.support.bridge_stack import Stack
from tests.support.services import CACHE


@contextlib.contextmanager
def local_cluster_stack(root: Path, pg_dsn: str, nodes: int = 3) -> Iterator[LocalStack]:
    """``up`` of a stack of ``nodes`` KRaft nodes on free ports under ``root`` (Postgres:
    the session's, external to it), without services; ``down --purge`` afterwards."""
    base = free_port_run(2 * nodes)
    stack = LocalStack(
        state=StateDir(root, cache_root=CACHE),
        ports=Ports(kafka=base, kafka_controller=base + 1),
        external_pg_dsn=pg_dsn,
        kafka_nodes=nodes,
    )
    stack.up(with_services=False)
    try:
        yield stack
    finally:
        stack.down(purge=True)


def kill_node(cluster: LocalKafkaCluster, node_id: int) -> None:
    """SIGKILL one node: no controlled shutdown, its leaderships move once it is fenced."""
    pid = cluster.node(node_id).pid()
    assert pid is not None, f"node {node_id} is not running"
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(pid), timeout=30, what=f"node {node_id} to die")


def restart_node(cluster: LocalKafkaCluster, node_id: int) -> None:
    """Start the node again; return once every partition has all its replicas in sync, as an
    operator waits before taking the next node away."""
    cluster.node(node_id).start(wait=False)
    kafka.wait_until_ready(cluster.bootstrap, timeout=120, brokers=cluster.nodes)
    wait_until(
        lambda: not under_replicated(cluster.bootstrap),
        timeout=120,
        what=f"every partition back in sync after node {node_id} returned",
    )


def under_replicated(bootstrap: str) -> list[str]:
    """``topic/partition`` of every partition with a replica out of sync."""
    metadata = kafka.admin(bootstrap).list_topics(timeout=10)
    return [
        f"{name}/{partition.id}"
        for name, topic in metadata.topics.items()
        for partition in topic.partitions.values()
        if sorted(partition.isrs) != sorted(partition.replicas)
    ]


def leader_of(bootstrap: str, topic: str, partition: int = 0) -> int:
    metadata = kafka.admin(bootstrap).list_topics(topic, timeout=10)
    return int(metadata.topics[topic].partitions[partition].leader)


@dataclass
class BrokerFleet:
    """Broker processes on ports of their own, and HAProxy in front of them at ``url``."""

    processes: list[CliProcess]
    balancer: LoadBalancer

    @property
    def url(self) -> str:
        return self.balancer.url


@contextlib.contextmanager
def broker_fleet(
    meta_dsn: str, kafka_bootstrap: str, tmp: Path, count: int = 2
) -> Iterator[BrokerFleet]:
    processes, ports = [], []
    with contextlib.ExitStack() as exits:
        for i in range(1, count + 1):
            process, url = broker_process(
                meta_dsn,
                kafka_bootstrap,
                tmp / f"broker-{i}.log",
            )
            exits.callback(process.stop)
            processes.append(process.start())
            ports.append(int(url.rsplit(":", 1)[1]))
        balancer = LoadBalancer(StateDir(tmp / "loadbalancer"), free_port(), ports)
        exits.callback(balancer.stop)
        balancer.start()
        yield BrokerFleet(processes, balancer)


@dataclass
class ClusterStack:
    stack: Stack  # the bridge's view: its broker_url is the load balancer
    fleet: BrokerFleet
    cluster: LocalKafkaCluster
    up: LocalStack  # what started the cluster: its status lists the nodes


@contextlib.contextmanager
def cluster_path(
    up: LocalStack, pg_dsn: str, pg_server_dsn: str, tmp: Path, slot: str, prefix: str
) -> Iterator[ClusterStack]:
    """The whole path on ``up``'s cluster: a changeserver on ``pg_dsn`` (its slot and
    publication ``slot``), a registry, two broker processes behind HAProxy (the bridge and
    every client go through it), all on a metadata database of its own."""
    cluster = up.kafka
    with contextlib.ExitStack() as exits:
        meta_dsn = exits.enter_context(pg.scratch_database(pg_server_dsn, "t_meta"))
        snapshots_dir = tmp / f"{slot}-snapshots"
        changeserver = ChangeServer(
            ChangeServerSettings(
                dsn=pg_dsn, slot=slot, db_dir=tmp / slot, snapshots_dir=snapshots_dir
            )
        )
        changeserver_url = exits.enter_context(serve_in_thread(changeserver.api_app))
        wait_until(changeserver.replicator.streaming.is_set, timeout=30, what="replication")
        registry_url = exits.enter_context(serve_in_thread(registry_app(meta_dsn)))
        fleet = exits.enter_context(broker_fleet(meta_dsn, cluster.bootstrap, tmp))
        stack = Stack(
            app_dsn=pg_dsn,
            meta_dsn=meta_dsn,
            kafka_bootstrap=cluster.bootstrap,
            changeserver_url=changeserver_url,
            broker_url=fleet.url,
            registry_url=registry_url,
            prefix=prefix,
            tmp=tmp,
            snapshots_dir=snapshots_dir,
            publication=slot,
        )
        yield ClusterStack(stack, fleet, cluster, up)
