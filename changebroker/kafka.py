"""Kafka client settings shared by every component that talks to Kafka."""

from __future__ import annotations

import os
import time
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


def wait_until_ready(bootstrap: str, timeout: float = 60.0) -> None:
    """Block until a broker answers a metadata request, or raise after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    # log_level 0: the refused connects while it starts are expected, not news.
    client = AdminClient(client_config(bootstrap, log_level=0))
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            metadata = client.list_topics(timeout=min(5.0, max(0.5, deadline - time.monotonic())))
            if metadata.brokers:
                return
        except KafkaException as exc:
            last_error = exc
        time.sleep(0.2)
    raise TimeoutError(f"Kafka at {bootstrap} did not answer within {timeout:.0f}s: {last_error}")
