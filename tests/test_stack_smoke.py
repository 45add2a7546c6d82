"""The real parts answer: pgoutput on a logical slot, a Kafka round trip, Spark reading Kafka."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import psycopg
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import NewTopic

from changebroker import kafka

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_logical_slot_yields_an_insert_through_pgoutput(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SHOW wal_level").fetchone() == ("logical",)
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, name text)")
        conn.execute("CREATE PUBLICATION smoke_pub FOR TABLE items")
        conn.execute("SELECT pg_create_logical_replication_slot('smoke_slot', 'pgoutput')")
        conn.execute("INSERT INTO items VALUES (1, 'first')")
        messages = [
            bytes(data)
            for (data,) in conn.execute(
                "SELECT data FROM pg_logical_slot_get_binary_changes('smoke_slot', NULL, NULL,"
                " 'proto_version', '1', 'publication_names', 'smoke_pub')"
            ).fetchall()
        ]
    assert [m[:1] for m in messages] == [b"B", b"R", b"I", b"C"]
    insert = messages[2]
    # Insert: 'I', relation oid (4), 'N', column count (2), then 't' + length + text per column.
    assert insert[5:8] == b"N\x00\x02"
    assert b"first" in insert


def _create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = kafka.admin(bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
        topic
    ].result(30)


def _produce(bootstrap: str, topic: str, values: list[bytes], partitions: int = 1) -> None:
    """Round robin over ``partitions``: keyless records all go to one partition while the
    producer's sticky partitioner fills a batch."""
    producer = Producer(kafka.producer_config(bootstrap))
    for index, value in enumerate(values):
        producer.produce(topic, value, partition=index % partitions)
    assert producer.flush(30) == 0


def test_kafka_produce_consume_round_trip(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("smoke")
    _create_topic(kafka_bootstrap, topic)
    sent = [json.dumps({"n": n}).encode() for n in range(5)]
    _produce(kafka_bootstrap, topic, sent)
    consumer = Consumer(
        kafka.client_config(kafka_bootstrap, **{"group.id": topic, "auto.offset.reset": "earliest"})
    )
    consumer.subscribe([topic])
    received: list[bytes] = []
    try:
        for _ in range(120):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                received.append(bytes(message.value() or b""))
            if len(received) == len(sent):
                break
    finally:
        consumer.close()
    assert received == sent


@pytest.mark.spark
def test_spark_reads_the_kafka_topic(
    kafka_bootstrap: str, unique_name: Callable[[str], str], spark: SparkSession
) -> None:
    topic = unique_name("spark")
    _create_topic(kafka_bootstrap, topic, partitions=2)
    _produce(kafka_bootstrap, topic, [f"row-{n}".encode() for n in range(10)], partitions=2)
    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    values = sorted(bytes(row.value).decode() for row in frame.select("value").collect())
    assert values == sorted(f"row-{n}" for n in range(10))
    assert sorted(r.partition for r in frame.select("partition").distinct().collect()) == [0, 1]
