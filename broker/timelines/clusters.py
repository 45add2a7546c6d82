"""This process's Kafka clients, one set per cluster, made when a cluster is first needed.

Timelines name their cluster (:class:`changebroker.kafka.Cluster`, resolved from their
storage when they are read), so clients are kept by cluster, not by storage id: a storage
deleted and made again with other servers gets clients of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from changebroker import kafka
from changebroker.broker.event_types.topics import Topics
from changebroker.broker.publishing.producer import KafkaProducer
from changebroker.broker.streams.cursors import Bounds, bounds
from changebroker.broker.streams.watermarks import Watermark, Watermarks
from changebroker.broker.timelines.model import Timeline, Timelines


class Clusters:
    def __init__(
        self,
        own: kafka.Cluster,
        replication_factor: int | None = None,
        min_insync_replicas: int | None = None,
    ) -> None:
        """``own``: this process's ``--kafka-bootstrap``, the storage ``default``."""
        self.own = own
        self._replication = (replication_factor, min_insync_replicas)
        self._producers: dict[kafka.Cluster, KafkaProducer] = {}
        self._topics: dict[kafka.Cluster, Topics] = {}
        self._watermarks: dict[kafka.Cluster, Watermarks] = {}

    def producer(self, cluster: kafka.Cluster) -> KafkaProducer:
        producer = self._producers.get(cluster)
        if producer is None:
            producer = KafkaProducer(cluster)
            producer.start()
            self._producers[cluster] = producer
        return producer

    def topics(self, cluster: kafka.Cluster) -> Topics:
        topics = self._topics.get(cluster)
        if topics is None:
            topics = self._topics[cluster] = Topics(cluster, *self._replication)
        return topics

    def watermarks(self, cluster: kafka.Cluster) -> Watermarks:
        marks = self._watermarks.get(cluster)
        if marks is None:
            marks = self._watermarks[cluster] = Watermarks(cluster)
        return marks

    async def marks(self, timeline: Timeline, partitions: Iterable[int]) -> dict[int, Watermark]:
        """The watermarks of ``partitions`` of ``timeline``'s topic."""
        return await self.watermarks(timeline.cluster).of(timeline.topic, partitions)

    async def bounds(self, timelines: Timelines, partitions: Iterable[int]) -> dict[int, Bounds]:
        """What ``partitions`` hold through every timeline whose topic exists."""
        wanted = list(partitions)
        marks = {t.order: await self.marks(t, wanted) for t in timelines.readable}
        return {p: bounds(timelines, marks, p) for p in wanted}

    async def close(self) -> None:
        for producer in self._producers.values():
            await asyncio.to_thread(producer.close)
        for marks in self._watermarks.values():
            await marks.close()
