"""The changeserver sequence a ``--until latest`` snapshot is exact at.

The bridge commits each batch of events together with its position record (the sequence
it has published up to) in one Kafka transaction. A snapshot's end offsets taken when no
bridge transaction is between its commit markers therefore hold exactly the events of the
transactions up to the last committed position record, that is every change up to that
record's ``since``: the ``/changes`` sequence to continue from.

Such a moment is found by reading the last stable offsets of every event partition and of
the positions partition twice, in one request each: when both reads agree, nothing was
committed in between and the first read is a cut between two bridge transactions. A bridge
that commits continuously can keep the reads from agreeing; after some attempts the
snapshot is taken anyway with no sequence (``null`` in the manifest).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from broker.bridge.transactions import POSITIONS_TOPIC
from changebroker import kafka
from changeserver.sequence import Sequence

ATTEMPTS = 50


@dataclass(frozen=True)
class Cut:
    ends: dict[str, dict[int, int]]  # topic -> partition -> end offset (exclusive)
    sequence: str | None  # the changeserver sequence the ends are exact at


def _stable(admin: Any, partitions: list[TopicPartition]) -> dict[tuple[str, int], int]:
    request = {tp: OffsetSpec.latest() for tp in partitions}
    futures = admin.list_offsets(
        request, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=30
    )
    return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}


def _position_before(bootstrap: str, bridge: str, end: int) -> dict[str, Any] | None:
    """The bridge's last committed position record below offset ``end``."""
    if end <= 0:
        return None
    consumer = Consumer(
        kafka.client_config(
            bootstrap,
            **{
                "group.id": f"changebroker-replay-cut-{bridge}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            },
        )
    )
    found: dict[str, Any] | None = None
    try:
        consumer.assign([TopicPartition(POSITIONS_TOPIC, 0, 0)])
        while True:
            message = consumer.poll(30)
            if message is None:
                raise TimeoutError(f"reading {POSITIONS_TOPIC} took over 30 s")
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return found
                raise KafkaException(error)
            offset = message.offset()
            if offset is not None and offset >= end:
                return found
            if message.key() == bridge.encode():
                value = message.value()
                found = json.loads(value) if value is not None else None
    finally:
        consumer.close()


def sequence_of(record: Mapping[str, Any]) -> str:
    """Every change up to it is published: the position, or below it a table held back."""
    held = [Sequence.parse(s) for s in record.get("held", {}).values()]
    return str(min([Sequence.parse(record["since"]), *held]))


def latest_cut(bootstrap: str, topics: Mapping[str, int], bridge: str) -> Cut:
    """End offsets of ``topics`` (name -> partition count) between two bridge commits, and
    the sequence they are exact at; the last read and no sequence when none is found."""
    admin = kafka.admin(bootstrap)
    partitions = [TopicPartition(t, p) for t, count in topics.items() for p in range(count)]
    try:
        first = _stable(admin, [*partitions, TopicPartition(POSITIONS_TOPIC, 0)])
    except KafkaException:  # no bridge has committed a position here
        return Cut(_ends(_stable(admin, partitions), topics), None)
    partitions.append(TopicPartition(POSITIONS_TOPIC, 0))
    for _ in range(ATTEMPTS):
        second = _stable(admin, partitions)
        if first == second:
            break
        first = second
    else:
        return Cut(_ends(first, topics), None)
    record = _position_before(bootstrap, bridge, first[(POSITIONS_TOPIC, 0)])
    return Cut(_ends(first, topics), sequence_of(record) if record else None)


def _ends(
    offsets: Mapping[tuple[str, int], int], topics: Mapping[str, int]
) -> dict[str, dict[int, int]]:
    return {t: {p: offsets[(t, p)] for p in range(count)} for t, count in topics.items()}
