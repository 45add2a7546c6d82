"""A single-node Kafka 4.x in KRaft mode, from the jars Maven resolves."""

from __future__ import annotations

import base64
import logging
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from changebroker import kafka, logs
from changebroker.stack import maven
from changebroker.stack.processes import read_pid, start_detached, stop_pid
from changebroker.stack.state import REPO_ROOT, StateDir

log = logging.getLogger(__name__)

POM = REPO_ROOT / "docker" / "local" / "kafka-pom.xml"

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
    state: StateDir
    port: int
    controller_port: int
    host: str = "127.0.0.1"
    heap: str = "768m"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.state.pid_file("kafka")

    @property
    def data_dir(self) -> Path:
        return self.state.data("kafka")

    def running(self) -> bool:
        return read_pid(self.pid_file) is not None

    def jars(self) -> list[Path]:
        return maven.resolve_jars(POM, self.state.cache / "kafka-jars")

    def start(self) -> None:
        java = shutil.which("java")
        if java is None:
            raise RuntimeError(
                "Java 17+ is needed to run Kafka: apt-get install openjdk-17-jre-headless"
            )
        jars = self.jars()
        classpath = ":".join(str(j) for j in jars)
        config = self._write_config()
        if not (self.data_dir / "log" / "meta.properties").exists():
            cluster_id = str(uuid.uuid4())
            done = subprocess.run(
                [
                    java,
                    "-cp",
                    classpath,
                    "kafka.tools.StorageTool",
                    "format",
                    # One argument: an id may start with "-", which would read as an option.
                    f"--cluster-id={_kafka_cluster_id(cluster_id)}",
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
                    "-XX:+UseG1GC",
                    f"-Dlog4j2.configurationFile={log4j}",
                    "-Djava.awt.headless=true",
                    "-cp",
                    classpath,
                    "kafka.Kafka",
                    str(config),
                ],
                log_file=self.state.log_file("kafka"),
                pid_file=self.pid_file,
            )
        kafka.wait_until_ready(self.bootstrap, timeout=120)
        log.info("kafka ready", extra=logs.fields(bootstrap=self.bootstrap))

    def stop(self) -> bool:
        return stop_pid(self.pid_file, timeout=30)

    def purge(self) -> None:
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def _write_config(self) -> Path:
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{self.host}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir / "log"),
            # One node: every internal topic has one replica.
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "8",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # Topics are created explicitly (one per event type), never by accident.
            "auto.create.topics.enable": "false",
            "num.partitions": "1",
            "log.retention.check.interval.ms": "10000",
        }
        path = self.data_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return path


def _kafka_cluster_id(value: str) -> str:
    """Kafka wants a cluster id as 16 bytes in unpadded URL-safe base64."""
    return base64.urlsafe_b64encode(uuid.UUID(value).bytes).decode().rstrip("=")
