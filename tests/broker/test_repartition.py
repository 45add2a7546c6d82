"""``PUT /event-types/{name}/partition-count``: more partitions, in every timeline, as Nakadi's
RepartitioningService adds them; subscriptions take the new ones up at ``begin`` without
their streams restarting."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from confluent_kafka.admin import AdminClient

from changebroker import kafka
from changebroker.broker.publishing.partitioning import java_string_hash
from changebroker.stack.processes import wait_until
from tests.broker.delivery_check import (
    Consumer,
    Publishers,
    check_exactly_once_in_order,
    wait_caught_up,
)
from tests.broker.stream_support import order, publish, read
from tests.broker.subscription_support import create, stats
from tests.broker.test_admin_settings import bearer, problem
from tests.broker.test_timelines import switch, topics_of
from tests.support.event_types import business_event_type


def repartition(client: httpx.Client, name: str, count: Any, **headers: str) -> httpx.Response:
    return client.put(
        f"/event-types/{name}/partition-count", json={"partition_count": count}, headers=headers
    )


def kafka_partitions(bootstrap: str, topic: str) -> int:
    metadata = AdminClient(kafka.client_config(bootstrap)).list_topics(topic, timeout=30)
    return len(metadata.topics[topic].partitions)


def test_repartition_as_nakadi_answers(
    client: httpx.Client, kafka_bootstrap: str, unique_name
) -> None:
    name = unique_name("widened")
    assert client.post("/event-types", json=business_event_type(name)).status_code == 201
    answer = repartition(client, name, 3)
    assert answer.status_code == 204, answer.text
    assert answer.content == b""
    assert len(client.get(f"/event-types/{name}/partitions").json()) == 3
    assert kafka_partitions(kafka_bootstrap, topics_of(client, name)[0]) == 3
    statistic = client.get(f"/event-types/{name}").json()["default_statistic"]
    assert (statistic["read_parallelism"], statistic["write_parallelism"]) == (3, 3)
    # Asking again for what is there is fine (a failed request is repeated until it works).
    assert repartition(client, name, 3).status_code == 204
    assert problem(repartition(client, name, 2), 422)["detail"] == (
        "Number of partitions can not decrease"
    )
    # The module's broker has --max-partitions 12.
    assert problem(repartition(client, name, 13), 422)["detail"] == (
        "Number of partitions should not be more than 12"
    )
    assert "partition_count is required" in str(problem(repartition(client, name, "4"), 422))
    assert problem(repartition(client, "nope", 4), 404)["detail"] == (
        'EventType "nope" does not exist'
    )
    assert len(client.get(f"/event-types/{name}/partitions").json()) == 3


def test_only_administrators_repartition(administered: httpx.Client, unique_name) -> None:
    name = unique_name("guarded")
    body = business_event_type(name)
    assert administered.post("/event-types", json=body, headers=bearer("shop")).status_code == 201
    refused = repartition(administered, name, 2, **bearer("shop"))
    assert "not one of the broker's administrators" in str(problem(refused, 403)["detail"])
    assert repartition(administered, name, 2, **bearer("ops")).status_code == 204


def test_hash_partitioning_spreads_over_the_new_count(client: httpx.Client, unique_name) -> None:
    name = unique_name("hashed")
    assert client.post("/event-types", json=business_event_type(name)).status_code == 201
    assert repartition(client, name, 3).status_code == 204
    numbers = [f"order-{i}" for i in range(30)]
    publish(client, name, [order(number) for number in numbers])
    batches = read(
        client,
        name,
        [{"partition": str(p), "offset": "BEGIN"} for p in range(3)],
        batch_limit=30,
        batch_flush_timeout=1,
        stream_limit=30,
        stream_timeout=10,
    )
    placed = {
        event["order_number"]: int(batch["cursor"]["partition"])
        for batch in batches
        for event in batch.get("events", [])
    }
    assert placed == {n: abs(java_string_hash(n)) % 3 for n in numbers}
    assert len(set(placed.values())) == 3


def test_a_subscription_stream_takes_new_partitions_up_under_load(
    client: httpx.Client, broker_url: str, unique_name
) -> None:
    name = unique_name("grown")
    body = business_event_type(name, partition_strategy="random", partition_key_fields=[])
    body["default_statistic"] = {**body["default_statistic"], "read_parallelism": 2}
    assert client.post("/event-types", json=body).status_code == 201
    subscription_id = create(client, [name], read_from="begin")["id"]
    consumer = Consumer(broker_url, subscription_id).start()
    publishers = Publishers([broker_url], name, count=2).start()
    try:
        wait_until(lambda: publishers.acked() >= 200, timeout=120, what="events on 2 partitions")
        assert repartition(client, name, 4).status_code == 204
        wait_until(
            lambda: {r.partition for r in consumer.reads} >= {"2", "3"},
            timeout=120,
            what="the stream to read the new partitions",
        )
        wait_until(lambda: publishers.acked() >= 600, timeout=120, what="events on 4 partitions")
    finally:
        publishers.stop()
    wait_caught_up(consumer, publishers)
    consumer.stop()
    # One stream all along: it took the new partitions up without restarting.
    assert consumer.streams == 1
    assert publishers.refused == {}
    check_exactly_once_in_order(consumer.reads, publishers)
    (item,) = stats(client, subscription_id)
    assert [p["partition"] for p in item["partitions"]] == ["0", "1", "2", "3"]
    assert all(p["unconsumed_events"] == 0 for p in item["partitions"])


def test_repartitioning_a_type_with_several_timelines(
    client: httpx.Client, kafka_bootstrap: str, make_event_type: Callable[..., str]
) -> None:
    name = make_event_type()  # one partition
    publish(client, name, [order("a"), order("b")])
    switch(client, name)
    publish(client, name, [order("c")])
    cursors_subscription = create(
        client,
        [name],
        read_from="cursors",
        initial_cursors=[{"event_type": name, "partition": "0", "offset": "BEGIN"}],
    )
    assert repartition(client, name, 2).status_code == 204
    first, second = client.get(f"/event-types/{name}/timelines").json()
    assert first["latest_position"] == {"offsets": [1, -1]}
    assert kafka_partitions(kafka_bootstrap, first["topic"]) == 2
    assert kafka_partitions(kafka_bootstrap, second["topic"]) == 2
    # A subscription that starts from cursors gets the new partition from its beginning.
    found = client.get(f"/subscriptions/{cursors_subscription['id']}").json()
    assert {"event_type": name, "partition": "1", "offset": "begin"} in found["initial_cursors"]
    publish(client, name, [order(f"new-{i}") for i in range(20)])
    lags = client.post(
        f"/event-types/{name}/cursors-lag",
        json=[{"partition": "0", "offset": "BEGIN"}, {"partition": "1", "offset": "BEGIN"}],
    ).json()
    assert sum(lag["unconsumed_events"] for lag in lags) == 23
    assert lags[1]["oldest_available_offset"] == "001-0001-000000000000000000"
