"""Kafka 4.x in KRaft mode from the jars Maven resolves: one node, or a cluster of several.

Every node is a combined controller and broker with its own ports, data dir, log and pid
file; node 1 keeps the single node's names (``kafka``), the others are ``kafka-2`` ... so
a one-node state folder stays what it was.
"""

from __future__ import annotations

import base64
import logging
import shutil
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from changebroker import kafka, logs, maven
from changebroker.stack.processes import read_pid, start_detached, stop_pid
from changebroker.state import StateDir

log = logging.getLogger(__name__)

POM = maven.pom("kafka-pom.xml")
# The collector settings of Kafka's own start script (kafka-run-class.sh): G1 left at its
# default 200 ms pause target grew the young generation until one collection paused every
# request for 35-39 ms (-Xlog:gc during the bridge's latency benchmark).
_GC_OPTIONS = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
)

_LOG4J2 = """\
Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: STDOUT
    Logger:
      - name: kafka
        level: WARN
      - name: org.apache.kafka
        level: WARN
"""


@dataclass
class LocalKafka:
    """One node; alone (``voters`` None) or one of a :class:`LocalKafkaCluster`."""

    state: StateDir
    port: int
    controller_port: int
    host: str = "127.0.0.1"
    heap: str = "768m"
    node_id: int = 1
    voters: str | None = None  # controller.quorum.voters of the cluster; None: this node alone
    cluster_size: int = 1
    cluster_id: str | None = None  # every node of a cluster is formatted with the same id

    @property
    def name(self) -> str:
        return "kafka" if self.node_id == 1 else f"kafka-{self.node_id}"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.state.pid_file(self.name)

    @property
    def log_file(self) -> Path:
        return self.state.log_file(self.name)

    @property
    def data_dir(self) -> Path:
        return self.state.data(self.name)

    def pid(self) -> int | None:
        return read_pid(self.pid_file)

    def running(self) -> bool:
        return read_pid(self.pid_file) is not None

    def jars(self) -> list[Path]:
        return maven.resolve_jars(POM, self.state.cache / "kafka-jars")

    def start(self, *, wait: bool = True) -> None:
        """Format the storage once, start the node unless it runs; ``wait``: until it answers."""
        java = shutil.which("java")
        if java is None:
            raise RuntimeError(
                "Java 17+ is needed to run Kafka: apt-get install openjdk-17-jre-headless"
            )
        jars = self.jars()
        classpath = ":".join(str(j) for j in jars)
        config = self._write_config()
        if not (self.data_dir / "log" / "meta.properties").exists():
            cluster_id = self.cluster_id or new_cluster_id()
            done = subprocess.run(
                [
                    java,
                    "-cp",
                    classpath,
                    "kafka.tools.StorageTool",
                    "format",
                    # One argument: an id may start with "-", which would read as an option.
                    f"--cluster-id={cluster_id}",
                    "-c",
                    str(config),
                ],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise RuntimeError(f"formatting KRaft storage failed:\n{done.stdout}{done.stderr}")
        if not self.running():
            log4j = self.data_dir / "log4j2.yaml"
            log4j.write_text(_LOG4J2)
            start_detached(
                [
                    java,
                    f"-Xmx{self.heap}",
                    "-Xms256m",
                    *_GC_OPTIONS,
                    f"-Dlog4j2.configurationFile={log4j}",
                    "-Djava.awt.headless=true",
                    "-cp",
                    classpath,
                    "kafka.Kafka",
                    str(config),
                ],
                log_file=self.log_file,
                pid_file=self.pid_file,
            )
        if wait:
            kafka.wait_until_ready(self.bootstrap, timeout=120)
            log.info("kafka ready", extra=logs.fields(bootstrap=self.bootstrap))

    def stop(self) -> bool:
        return stop_pid(self.pid_file, timeout=30)

    def purge(self) -> None:
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def _write_config(self) -> Path:
        # Internal topics as replicated as the cluster allows: three copies, two in sync
        # before a write counts, on three nodes or more (a node may die, nothing is lost).
        replicas = str(min(3, self.cluster_size))
        in_sync = str(max(1, min(3, self.cluster_size) - 1))
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters
            or f"{self.node_id}@{self.host}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir / "log"),
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": in_sync,
            "transaction.state.log.num.partitions": "8",
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": in_sync,
            # Topics created without settings of their own (ours always say).
            "default.replication.factor": replicas,
            "min.insync.replicas": in_sync,
            "group.initial.rebalance.delay.ms": "0",
            # Topics are created explicitly (one per event type), never by accident.
            "auto.create.topics.enable": "false",
            "num.partitions": "1",
            "log.retention.check.interval.ms": "10000",
        }
        path = self.data_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return path


def new_cluster_id() -> str:
    """Kafka wants a cluster id as 16 bytes in unpadded URL-safe base64."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@dataclass
class LocalKafkaCluster:
    """``nodes`` combined controller+broker nodes; node ``i`` (from 1) listens on ``port +
    2 (i - 1)`` and ``controller_port + 2 (i - 1)`` (9092/9093, 9094/9095, ... by default)."""

    state: StateDir
    port: int
    controller_port: int
    nodes: int = 1
    host: str = "127.0.0.1"

    @property
    def heap(self) -> str:
        return "768m" if self.nodes == 1 else "512m"

    def node(self, node_id: int) -> LocalKafka:
        step = 2 * (node_id - 1)
        if self.nodes == 1:
            return LocalKafka(self.state, self.port, self.controller_port, self.host)
        voters = ",".join(
            f"{i}@{self.host}:{self.controller_port + 2 * (i - 1)}"
            for i in range(1, self.nodes + 1)
        )
        return LocalKafka(
            self.state,
            self.port + step,
            self.controller_port + step,
            self.host,
            heap=self.heap,
            node_id=node_id,
            voters=voters,
            cluster_size=self.nodes,
            cluster_id=self._cluster_id(),
        )

    def all_nodes(self) -> list[LocalKafka]:
        return [self.node(i) for i in range(1, self.nodes + 1)]

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.all_nodes())

    def jars(self) -> list[Path]:
        return self.node(1).jars()

    def running(self) -> bool:
        return any(node.running() for node in self.all_nodes())

    def start(self) -> None:
        """Start every node that is not running; return once all of them are brokers."""
        if self.nodes == 1:
            self.node(1).start()
            return
        for node in self.all_nodes():
            node.start(wait=False)
        kafka.wait_until_ready(self.bootstrap, timeout=180, brokers=self.nodes)
        log.info("kafka cluster ready", extra=logs.fields(bootstrap=self.bootstrap))

    def stop(self) -> list[str]:
        """Stop every node at once (one after the other, the last ones wait for a controller
        quorum that is gone); the names of those that ran."""
        nodes = self.all_nodes()
        with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
            stopped = list(pool.map(LocalKafka.stop, nodes))
        return [node.name for node, ran in zip(nodes, stopped, strict=True) if ran]

    def purge(self) -> None:
        for node in self.all_nodes():
            node.purge()

    def status(self) -> list[dict[str, object]]:
        """Every node: id, bootstrap, pid (None while it is down), data dir and log."""
        return [
            {
                "node_id": node.node_id,
                "bootstrap": node.bootstrap,
                "controller": f"{node.host}:{node.controller_port}",
                "pid": node.pid(),
                "data_dir": str(node.data_dir),
                "log": str(node.log_file),
            }
            for node in self.all_nodes()
        ]

    def _cluster_id(self) -> str:
        """The cluster's id, made once and kept beside node 1's data (purge forgets it)."""
        path = self.state.data("kafka") / "cluster.id"
        if not path.exists():
            path.write_text(new_cluster_id())
        return path.read_text().strip()
