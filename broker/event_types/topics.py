"""Kafka topics behind event types: one per timeline (:mod:`changebroker.broker.timelines`), created
with the event type or a new timeline, deleted with the event type or a timeline's retention."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from changebroker import kafka

# As Nakadi waits for new partitions to show before it answers a repartitioning.
PARTITIONS_SHOWN_SECONDS = 10.0


class TopicError(RuntimeError):
    """Kafka refused a topic operation; the message carries Kafka's reason."""


def topic_name(event_type: str) -> str:
    """A fresh topic per creation: a re-created event type never sees a deleted one's events."""
    return f"nakadi.{event_type}.{uuid.uuid4().hex[:12]}"


# Nakadi's cleanup_policy as Kafka's cleanup.policy.
KAFKA_CLEANUP_POLICIES = {
    "delete": "delete",
    "compact": "compact",
    "compact_and_delete": "compact,delete",
}


def topic_config(event_type: dict[str, Any], default_retention_ms: int) -> dict[str, str]:
    retention = (event_type.get("options") or {}).get("retention_time") or default_retention_ms
    return {
        "retention.ms": str(retention),
        "cleanup.policy": KAFKA_CLEANUP_POLICIES[event_type["cleanup_policy"]],
    }


class Topics:
    """Topic operations on one Kafka cluster."""

    def __init__(
        self,
        cluster: kafka.Cluster,
        replication_factor: int | None,
        min_insync_replicas: int | None,
    ) -> None:
        self._admin: AdminClient = cluster.admin()
        self._asked = (replication_factor, min_insync_replicas)
        # Resolved from the cluster at the first creation, then kept: a node down later
        # must not shrink the replication of the topics created while it is away.
        self._replication: kafka.Replication | None = None

    async def create(self, topic: str, partitions: int, config: dict[str, str]) -> None:
        if self._replication is None:
            self._replication = await asyncio.to_thread(
                kafka.replication_of, self._admin, *self._asked
            )
        new = NewTopic(
            topic,
            num_partitions=partitions,
            replication_factor=self._replication.factor,
            config={**self._replication.topic_config(), **config},
        )
        await self._wait(self._admin.create_topics([new])[topic], f"create topic {topic}")

    async def delete(self, topic: str) -> None:
        try:
            await self._wait(self._admin.delete_topics([topic])[topic], f"delete topic {topic}")
        except TopicError as exc:
            cause = exc.__cause__
            unknown = (
                isinstance(cause, KafkaException)
                and cause.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            )
            if not unknown:
                raise

    async def partitions(self, topic: str) -> int:
        """How many partitions ``topic`` has now."""
        metadata = await asyncio.to_thread(self._admin.list_topics, topic, timeout=30)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise TopicError(f"Kafka does not know topic {topic}")
        return len(found.partitions)

    async def add_partitions(self, topic: str, count: int) -> None:
        """Grow ``topic`` to ``count`` partitions (nothing when it has them already); returns
        once the cluster's metadata shows them, so a writer asking next writes to them."""
        if await self.partitions(topic) >= count:
            return
        futures = self._admin.create_partitions([NewPartitions(topic, count)])
        await self._wait(futures[topic], f"add partitions to {topic}")
        deadline = time.monotonic() + PARTITIONS_SHOWN_SECONDS
        while await self.partitions(topic) < count:
            if time.monotonic() > deadline:
                raise TopicError(
                    f"Kafka added partitions to {topic} but does not show {count} after"
                    f" {PARTITIONS_SHOWN_SECONDS:g} s"
                )
            await asyncio.sleep(0.1)

    async def set_config(self, topic: str, config: dict[str, str]) -> None:
        """Set these topic properties (a ``topic_config``), leaving the others as they are."""
        resource = ConfigResource(
            ConfigResource.Type.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
                for name, value in config.items()
            ],
        )
        futures = self._admin.incremental_alter_configs([resource])
        await self._wait(futures[resource], f"configure {topic}")

    def cluster_metadata(self, timeout: float) -> None:
        """Blocks until the cluster answers a metadata request; ``KafkaException`` after
        ``timeout`` seconds without an answer."""
        self._admin.list_topics(timeout=timeout)

    @staticmethod
    async def _wait(future: Any, what: str) -> None:
        try:
            await asyncio.wrap_future(future)
        except KafkaException as exc:
            raise TopicError(f"Kafka could not {what}: {exc.args[0].str()}") from exc
