"""The bridge's batches handed over while a Kafka transaction is under way go together in the
next one, in order, with the newest position."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic

from changebroker import kafka
from changebroker.bridge.commits import Commits
from changebroker.bridge.transactions import (
    Transactions,
    ensure_positions_topic,
    load_position,
)
from changebroker.broker.publishing.producer import Message


def events_topic(bootstrap: str, name: str) -> str:
    admin = kafka.admin(bootstrap)
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])[name].result(30)
    return name


@contextlib.contextmanager
def transactional(bootstrap: str, name: str) -> Iterator[tuple[str, Transactions]]:
    """An events topic and a transactional producer named ``name``, closed afterwards."""
    topic = events_topic(bootstrap, name)
    ensure_positions_topic(bootstrap, None, None)
    producer = Transactions(bootstrap, name)
    try:
        yield topic, producer
    finally:
        producer.close()


def committed_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """The first ``count`` records a read_committed consumer reads from ``topic``."""
    consumer = Consumer(
        kafka.client_config(
            bootstrap,
            **{"group.id": f"{topic}-reader", "isolation.level": "read_committed"},
        )
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        while len(values) < count:
            message = consumer.poll(30)
            assert message is not None, f"read {values} of {count} within 30 s"
            assert message.error() is None, message.error()
            value = message.value()
            assert value is not None
            values.append(value)
    finally:
        consumer.close()
    return values


# Each transaction ends with a commit marker, which takes an offset of its own.
@pytest.mark.parametrize(
    ("max_waiting", "transactions", "last_offset"), [(100, [1, 3], 3), (1, [1, 2, 3], 4)]
)
def test_batches_handed_over_during_a_transaction_go_together_in_the_next(
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    max_waiting: int,
    transactions: list[int],
    last_offset: int,
) -> None:
    name = unique_name("commits")
    tags: list[int] = []

    async def hand_over(topic: str, producer: Transactions) -> None:
        commits = Commits(producer, tags.append, max_waiting)
        for n in (1, 2, 3):
            # Nothing here lets the first transaction's thread report back: 2 and 3 wait for
            # it unless one waiting message is already too many.
            message = Message(topic, 0, None, f"event {n}".encode())
            await commits.add([message], {"since": str(n)}, n)
        await commits.drain()

    with transactional(kafka_bootstrap, name) as (topic, producer):
        asyncio.run(hand_over(topic, producer))

    assert tags == transactions
    assert committed_values(kafka_bootstrap, topic, 3) == [b"event 1", b"event 2", b"event 3"]
    position = load_position(kafka_bootstrap, name)
    assert position is not None
    assert position["since"] == "3"
    assert position["offsets"] == {topic: {"0": last_offset}}


@pytest.mark.parametrize(("interval", "transactions"), [(0.0, [1, 2, 3]), (5.0, [1, 3])])
def test_a_transaction_starts_at_most_once_an_interval(
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    interval: float,
    transactions: list[int],
) -> None:
    """Batches handed over after a transaction committed, within its interval, wait for the
    next turn together; with no interval the first of them starts one at once."""
    name = unique_name("interval")
    tags: list[int] = []

    async def hand_over(topic: str, producer: Transactions) -> None:
        first_committed = asyncio.Event()

        def committed(tag: int) -> None:
            tags.append(tag)
            first_committed.set()

        commits = Commits(producer, committed, 100, interval)
        await commits.add([Message(topic, 0, None, b"event 1")], {"since": "1"}, 1)
        await first_committed.wait()
        for n in (2, 3):
            await commits.add(
                [Message(topic, 0, None, f"event {n}".encode())], {"since": str(n)}, n
            )
        await commits.drain()

    with transactional(kafka_bootstrap, name) as (topic, producer):
        asyncio.run(hand_over(topic, producer))

    assert tags == transactions
    assert committed_values(kafka_bootstrap, topic, 3) == [b"event 1", b"event 2", b"event 3"]
