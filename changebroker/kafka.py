"""Kafka client settings shared by every component that talks to Kafka."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

# librdkafka properties every client adds, ``key=value`` pairs separated by ``;``: how a
# deployment gives TLS or SASL settings (security.protocol=SASL_SSL;sasl.mechanism=SCRAM-SHA-512;
# sasl.username=...;sasl.password=...;ssl.ca.location=/etc/kafka/ca.pem).
CLIENT_CONFIG_ENV = "CHANGEBROKER_KAFKA_CLIENT_CONFIG"


def deployment_config(text: str | None = None) -> dict[str, str]:
    """The properties of ``CHANGEBROKER_KAFKA_CLIENT_CONFIG`` (or ``text``)."""
    raw = os.environ.get(CLIENT_CONFIG_ENV, "") if text is None else text
    properties = {}
    for pair in raw.split(";"):
        if not pair.strip():
            continue
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise ValueError(f"{CLIENT_CONFIG_ENV} wants key=value;key=value, not {pair!r}")
        properties[key.strip()] = value.strip()
    return properties


def client_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    """Base librdkafka settings: loopback-friendly and quiet about transient disconnects,
    with the deployment's TLS/SASL properties."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "broker.address.family": "v4",
        "log.connection.close": False,
        **deployment_config(),
    }
    config.update(overrides)
    return config


def producer_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    """No acknowledged event is ever lost: acks from all replicas, idempotent retries."""
    return client_config(
        bootstrap,
        **{"acks": "all", "enable.idempotence": True, "linger.ms": 5, **overrides},
    )


def admin(bootstrap: str) -> AdminClient:
    return AdminClient(client_config(bootstrap))


@dataclass(frozen=True)
class Cluster:
    """A Kafka cluster: where it is, and the librdkafka properties its clients need beyond the
    deployment's (``CHANGEBROKER_KAFKA_CLIENT_CONFIG``, which they override)."""

    bootstrap: str
    properties: tuple[tuple[str, str], ...] = ()

    def config(self, **overrides: Any) -> dict[str, Any]:
        """Client settings for this cluster (``client_config``), ``overrides`` last."""
        return client_config(self.bootstrap, **{**dict(self.properties), **overrides})

    def producer_config(self, **overrides: Any) -> dict[str, Any]:
        return producer_config(self.bootstrap, **{**dict(self.properties), **overrides})

    def admin(self) -> AdminClient:
        return AdminClient(self.config())


def wait_until_ready(bootstrap: str, timeout: float = 60.0, brokers: int = 1) -> None:
    """Block until ``brokers`` brokers show in the metadata, or raise after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    # log_level 0: the refused connects while it starts are expected, not news.
    client = AdminClient(client_config(bootstrap, log_level=0))
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            metadata = client.list_topics(timeout=min(5.0, max(0.5, deadline - time.monotonic())))
            if len(metadata.brokers) >= brokers:
                return
        except KafkaException as exc:
            last_error = exc
        time.sleep(0.2)
    raise TimeoutError(f"Kafka at {bootstrap} did not answer within {timeout:.0f}s: {last_error}")


@dataclass(frozen=True)
class Replication:
    """How many copies a new topic gets, and how many must have a write before it counts."""

    factor: int
    min_insync: int

    def topic_config(self) -> dict[str, str]:
        return {"min.insync.replicas": str(self.min_insync)}


def replication(bootstrap: str, factor: int | None, min_insync: int | None) -> Replication:
    """``factor`` and ``min_insync`` as given, else what the cluster allows: 3 copies, 2 in
    sync on 3 brokers or more (one may go away, no acknowledged write is lost), one of each
    on a single broker. The brokers are counted from the cluster's metadata."""
    return replication_of(admin(bootstrap), factor, min_insync)


def replication_of(client: AdminClient, factor: int | None, min_insync: int | None) -> Replication:
    """``replication`` of the cluster ``client`` talks to."""
    if factor is None or min_insync is None:
        metadata = client.list_topics(timeout=30)
        allowed = min(3, max(1, len(metadata.brokers)))
        factor = factor or allowed
        min_insync = min_insync or max(1, min(factor, allowed) - 1)
    if not 1 <= min_insync <= factor:
        raise ValueError(
            f"min.insync.replicas {min_insync} must be between 1 and the replication factor"
            f" {factor}: lower it (or raise the factor)"
        )
    return Replication(factor, min_insync)
