"""Events and the bridge's position in one Kafka transaction; the position read back at start.

The position is a record in a compacted topic keyed by the bridge's name. ``init_transactions``
under the bridge's ``transactional.id`` fences any earlier incarnation and aborts what it left
open, so once it returns, the newest committed position record is exactly where the committed
events end: a crash at any moment neither skips nor repeats a change.

The record also names that end in Kafka's terms: ``offsets``, per topic and partition, the
offset of the last event the bridge ever wrote there (from the delivery reports, which a flush
inside the transaction collects before the record is produced). A reader of the newest
committed record (the replay job) then knows exactly which events make up the changes up to
its ``since``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from changebroker import kafka
from changebroker.broker.publishing.producer import Message

POSITIONS_TOPIC = "changebroker.bridge.positions"


def ensure_positions_topic(
    bootstrap: str, replication_factor: int | None, min_insync_replicas: int | None
) -> None:
    replication = kafka.replication(bootstrap, replication_factor, min_insync_replicas)
    new = NewTopic(
        POSITIONS_TOPIC,
        num_partitions=1,
        replication_factor=replication.factor,
        config={"cleanup.policy": "compact", **replication.topic_config()},
    )
    admin = kafka.admin(bootstrap)  # held: a collected client fails its pending futures
    future = admin.create_topics([new])[POSITIONS_TOPIC]
    try:
        future.result(timeout=30)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def load_position(bootstrap: str, name: str) -> dict[str, Any] | None:
    """The newest committed position record of bridge ``name``, ``None`` before the first.

    Reads up to the end the partition had when the read began: other bridges (and this
    one, for the replay) keep committing, and a transaction open at the tail keeps the
    end-of-partition event from coming, so waiting for it alone may never end.
    """
    consumer = Consumer(
        kafka.client_config(
            bootstrap,
            **{
                "group.id": f"changebroker-bridge-{name}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            },
        )
    )
    found: dict[str, Any] | None = None
    try:
        partition = TopicPartition(POSITIONS_TOPIC, 0, 0)
        _, end = consumer.get_watermark_offsets(partition, timeout=30, cached=False)
        if end == 0:
            return None
        consumer.assign([partition])
        while True:
            message = consumer.poll(30)
            if message is None:
                raise TimeoutError(f"reading {POSITIONS_TOPIC} took over 30 s")
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return found
                raise KafkaException(error)
            if message.key() == name.encode():
                value = message.value()
                found = json.loads(value) if value is not None else None
            # Past the last record there was (a commit marker, when it was the last): every
            # record before it was decided when the read began, so nothing older can follow.
            offset = message.offset()
            if offset is not None and offset >= end - 1:
                return found
    finally:
        consumer.close()


class Transactions:
    """A transactional producer: :meth:`commit` writes a batch of events and a position
    record atomically, or raises with nothing visible to read_committed consumers."""

    def __init__(self, bootstrap: str, name: str) -> None:
        self._name = name.encode()
        self._producer = Producer(
            kafka.producer_config(
                bootstrap,
                **{
                    "transactional.id": f"changebroker-bridge-{name}",
                    # The batch is sent and committed at once: waiting would only add latency.
                    "linger.ms": 1,
                    "queue.buffering.max.messages": 1_000_000,
                    "transaction.timeout.ms": 60_000,
                },
            )
        )
        self._producer.init_transactions(60)
        # As committed: init_transactions aborted whatever came after the newest record.
        record = load_position(bootstrap, name) or {}
        self._offsets: dict[str, dict[str, int]] = record.get("offsets", {})

    def commit(self, messages: Sequence[Message], position: dict[str, Any]) -> None:
        producer = self._producer
        offsets = {topic: dict(partitions) for topic, partitions in self._offsets.items()}

        def delivered(error: KafkaError | None, message: Any) -> None:
            if error is None:
                partitions = offsets.setdefault(message.topic(), {})
                partition = str(message.partition())
                partitions[partition] = max(partitions.get(partition, -1), message.offset())

        # Records of one partition are written in the order produced, so the last one's
        # offset is the partition's newest: only it needs a delivery report read in Python.
        last = {(message.topic, message.partition): i for i, message in enumerate(messages)}
        reported = set(last.values())
        # produce() called straight, positionally (a method and keywords around each record
        # cost a third of it); a full local queue is waited out by _produce.
        produce = producer.produce
        producer.begin_transaction()
        try:
            for i, message in enumerate(messages):
                on_delivery = delivered if i in reported else None
                try:
                    produce(
                        message.topic, message.value, message.key, message.partition, on_delivery
                    )
                except BufferError:
                    self._produce(
                        message.topic, message.partition, message.key, message.value, on_delivery
                    )
            if messages and producer.flush(60) > 0:
                raise TimeoutError("the batch's events were not acknowledged within 60 s")
            record = {**position, "offsets": offsets}
            # orjson: the record holds every unit, so it is written whole each transaction.
            self._produce(POSITIONS_TOPIC, 0, self._name, orjson.dumps(record))
            producer.commit_transaction(60)
            self._offsets = offsets
        except KafkaException as exc:
            # Whatever went wrong, this transaction's records never become readable; the
            # caller starts over from the committed position with a fresh producer.
            if exc.args[0].txn_requires_abort():
                producer.abort_transaction(30)
            raise

    def _produce(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        on_delivery: Callable[[KafkaError | None, Any], None] | None = None,
    ) -> None:
        while True:
            try:
                self._producer.produce(
                    topic, value, key, partition=partition, on_delivery=on_delivery
                )
                return
            except BufferError:
                # The local queue is full: let deliveries drain it.
                self._producer.poll(0.01)

    def close(self) -> None:
        self._producer.flush(5)
