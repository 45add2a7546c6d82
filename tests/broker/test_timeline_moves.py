"""An event type moves from one Kafka cluster to another and back while publishers and a
subscription consumer keep going, through several broker processes: every acknowledged
event is read once, each partition in order, from the timelines of both clusters."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from changebroker.stack.processes import wait_until
from changebroker.stack.run import broker_process
from tests.broker.delivery_check import (
    Consumer,
    Publishers,
    check_exactly_once_in_order,
    wait_caught_up,
)
from tests.broker.stream_support import read
from tests.broker.subscription_support import create
from tests.broker.test_storages import storage
from tests.broker.test_timelines import existing_topics, switch
from tests.support.event_types import business_event_type
from tests.support.second_kafka import second_kafka

PARTITIONS = 4


@pytest.fixture(scope="module")
def second_bootstrap() -> Iterator[str]:
    with second_kafka() as bootstrap:
        yield bootstrap


def _more_acknowledged(publishers: Publishers, events: int) -> None:
    wanted = publishers.acked() + events
    wait_until(lambda: publishers.acked() >= wanted, timeout=120, what=f"{events} more events")


def test_an_event_type_moves_between_clusters_under_load(
    client: httpx.Client,
    broker_url: str,
    broker_dsn: str,
    kafka_bootstrap: str,
    second_bootstrap: str,
    tmp_path: Path,
    unique_name,
) -> None:
    # Two more broker processes (--workers 2) on the same database: each pauses for the switch.
    process, other_url = broker_process(
        broker_dsn, kafka_bootstrap, tmp_path / "broker.log", "--workers", "2"
    )
    process.start()
    try:
        second = unique_name("second")
        assert client.post("/storages", json=storage(second, second_bootstrap)).status_code == 201
        name = unique_name("moving")
        body = business_event_type(name)
        body["default_statistic"] = {**body["default_statistic"], "read_parallelism": PARTITIONS}
        assert client.post("/event-types", json=body).status_code == 201
        subscription_id = create(client, [name], read_from="begin")["id"]
        consumer = Consumer(broker_url, subscription_id).start()
        publishers = Publishers([broker_url, other_url], name, count=3).start()
        try:
            _more_acknowledged(publishers, 300)
            switch(client, name, second)
            _more_acknowledged(publishers, 300)
            switch(client, name, "default")
            _more_acknowledged(publishers, 300)
        finally:
            publishers.stop()
        wait_caught_up(consumer, publishers)
        consumer.stop()
    finally:
        process.stop()
    # Writes to a switching event type wait for the switch; none is refused.
    assert publishers.refused == {}
    check_exactly_once_in_order(consumer.reads, publishers)
    timelines = client.get(f"/event-types/{name}/timelines").json()
    assert [(t["order"], t["storage_id"]) for t in timelines] == [
        (1, "default"),
        (2, second),
        (3, "default"),
    ]
    assert timelines[1]["topic"] in existing_topics(second_bootstrap)
    # Events were read from all three timelines.
    orders = {int(read.offset.split("-")[1], 16) for read in consumer.reads}
    assert orders == {1, 2, 3}
    # A low-level stream from BEGIN reads the same events, partition by partition alike.
    total = len(consumer.reads)
    batches = read(
        client,
        name,
        [{"partition": str(p), "offset": "BEGIN"} for p in range(PARTITIONS)],
        batch_limit=500,
        batch_flush_timeout=1,
        stream_limit=total,
        stream_timeout=60,
    )
    streamed: dict[str, list[str]] = defaultdict(list)
    for batch in batches:
        for event in batch.get("events", []):
            streamed[batch["cursor"]["partition"]].append(event["metadata"]["eid"])
    subscribed: dict[str, list[str]] = defaultdict(list)
    for r in consumer.reads:
        subscribed[r.partition].append(r.eid)
    assert streamed == subscribed
    # Nakadi keeps an event type that has subscriptions; its subscription goes first.
    assert client.delete(f"/subscriptions/{subscription_id}").status_code == 204
    assert client.delete(f"/event-types/{name}").status_code == 200
    wait_until(
        lambda: timelines[1]["topic"] not in existing_topics(second_bootstrap),
        timeout=30,
        what="the other cluster's topic to go with the event type",
    )
