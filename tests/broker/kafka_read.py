"""Read back what the broker wrote, straight from Kafka, to check it independently of the API."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import psycopg
from confluent_kafka import Consumer, TopicPartition

from changebroker import kafka


@dataclass(frozen=True)
class Stored:
    partition: int
    offset: int
    key: bytes | None
    event: dict[str, Any]


def topic_of(broker_dsn: str, event_type: str) -> tuple[str, int]:
    with psycopg.connect(broker_dsn) as conn:
        row = conn.execute(
            "SELECT topic, partitions FROM broker_event_types WHERE name = %s", (event_type,)
        ).fetchone()
    assert row is not None, f"no event type {event_type}"
    return row[0], row[1]


def read_all(bootstrap: str, topic: str, partitions: int) -> list[Stored]:
    """Every message of ``topic`` up to its current end, in partition then offset order."""
    consumer = Consumer(
        kafka.client_config(bootstrap, **{"group.id": "tests", "enable.auto.commit": False})
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
        wanted = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in wanted])
        out: list[Stored] = []
        while wanted:
            message = consumer.poll(10)
            assert message is not None, f"timed out reading {topic}"
            assert message.error() is None, message.error()
            partition, offset, value = message.partition(), message.offset(), message.value()
            assert partition is not None and offset is not None and value is not None
            out.append(Stored(partition, offset, message.key(), json.loads(value)))
            if offset + 1 >= ends[partition]:
                wanted.discard(partition)
                consumer.incremental_unassign([TopicPartition(topic, partition)])
        return sorted(out, key=lambda s: (s.partition, s.offset))
    finally:
        consumer.close()
