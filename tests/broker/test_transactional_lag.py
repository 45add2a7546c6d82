"""Topics written in Kafka transactions (as the bridge writes its data-change event types)
end every transaction with a control record, which takes an offset but is no event: the
newest available offset, a partition's lag and a subscription's unconsumed events count the
last committed event, not the marker after it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import httpx
import psycopg
from confluent_kafka import Producer

from changebroker import kafka
from changebroker.broker.streams.cursors import format_offset
from tests.broker.subscription_support import Stream, commit, create, stats


def _topic(broker_dsn: str, name: str) -> str:
    with psycopg.connect(broker_dsn) as conn:
        row = conn.execute("SELECT topic FROM broker_event_types WHERE name = %s", (name,))
        (topic,) = row.fetchone() or ("",)
    return str(topic)


def _publish_in_transactions(
    bootstrap: str,
    topic: str,
    batches: list[list[str]],
    *,
    partition: int = 0,
    abort: bool = False,
) -> None:
    """One transaction per batch into ``partition``, each committed (or aborted)."""
    producer = Producer(kafka.producer_config(bootstrap, **{"transactional.id": topic}))
    producer.init_transactions(30)
    for numbers in batches:
        producer.begin_transaction()
        for number in numbers:
            event = {
                "order_number": number,
                "metadata": {"eid": str(uuid.uuid4()), "occurred_at": "2026-11-23T10:00:00Z"},
            }
            producer.produce(topic, json.dumps(event).encode(), partition=partition)
        if abort:
            # Written to the log first: an abort drops what is still queued.
            producer.flush(30)
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)


def test_lag_counts_committed_events_not_transaction_markers(
    client: httpx.Client, broker_dsn: str, kafka_bootstrap: str, make_event_type: Callable[..., str]
) -> None:
    name = make_event_type()
    topic = _topic(broker_dsn, name)
    # Offsets 0-1, marker 2; 3-4, marker 5.
    _publish_in_transactions(kafka_bootstrap, topic, [["a", "b"], ["c", "d"]])

    partition = client.get(f"/event-types/{name}/partitions/0").json()
    assert partition["newest_available_offset"] == format_offset(4)

    subscription = create(client, [name], read_from="begin")
    stream = Stream(client, subscription["id"], batch_flush_timeout=1, batch_limit=10)
    try:
        batches = stream.read_events(4)
        last = batches[-1]["cursor"]
        assert last["offset"] == format_offset(4)
        assert commit(client, subscription["id"], stream.id, [last]).status_code in (200, 204)
        (item,) = stats(client, subscription["id"])
        assert [p["unconsumed_events"] for p in item["partitions"]] == [0]
    finally:
        stream.close()
    lag = client.post(
        f"/event-types/{name}/cursors-lag", json=[{"partition": "0", "offset": last["offset"]}]
    )
    assert lag.status_code == 200, lag.text
    assert lag.json()[0]["unconsumed_events"] == 0


def test_newest_event_found_behind_a_long_aborted_transaction_in_each_partition(
    client: httpx.Client, broker_dsn: str, kafka_bootstrap: str, make_event_type: Callable[..., str]
) -> None:
    """An aborted transaction of more records than the first tail window read hides nothing
    and counts for nothing; the partitions' tails are read together, each as far back as it
    needs."""
    statistic = {"messages_per_minute": 1, "message_size": 1}
    name = make_event_type(
        default_statistic={**statistic, "read_parallelism": 4, "write_parallelism": 4}
    )
    topic = _topic(broker_dsn, name)
    aborted = [f"aborted-{i}" for i in range(40)]
    # Partition 0: offsets 0-1, marker 2, 40 aborted records, marker 43.
    _publish_in_transactions(kafka_bootstrap, topic, [["a", "b"]], partition=0)
    _publish_in_transactions(kafka_bootstrap, topic, [aborted], partition=0, abort=True)
    # Partition 1: aborted records only. Partition 2: nothing. Partition 3: 0-1, marker 2.
    _publish_in_transactions(kafka_bootstrap, topic, [aborted], partition=1, abort=True)
    _publish_in_transactions(kafka_bootstrap, topic, [["c", "d"]], partition=3)

    answer = client.get(f"/event-types/{name}/partitions")
    assert answer.status_code == 200, answer.text
    newest = {p["partition"]: p["newest_available_offset"] for p in answer.json()}
    assert newest["0"] == format_offset(1)
    assert newest["1"] == newest["2"]  # no event, as where nothing was written
    assert newest["3"] == format_offset(1)
