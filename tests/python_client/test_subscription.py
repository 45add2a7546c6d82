"""Subscription against a real broker: two instances sharing a subscription process every
event exactly once across rebalances, a third waits out 409 until a partition is free, and
``from_snapshot`` starts right after a replay manifest's cursors."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from changebroker.broker.event_types.examples import order_received
from changebroker.client import (
    AsyncSubscription,
    EventBatch,
    Subscription,
    SubscriptionRefused,
)
from changebroker.stack.processes import wait_until
from tests.support.event_types import order_events

# A stream that ends holds the partitions it was sent events of, uncommitted, for its
# commit_timeout (broker/subscriptions/session.py): short, so a stopped instance's move soon.
FAST: dict[str, Any] = {
    "batch_flush_timeout": 1,
    "batch_limit": 5,
    "max_uncommitted_events": 20,
    "commit_timeout": 3,
}


def _event_type(broker_url: str, name: str, partitions: int) -> str:
    body = order_received(name, "client-tests", partitions)
    httpx.post(f"{broker_url}/event-types", json=body, timeout=60).raise_for_status()
    return name


def _subscription(broker_url: str, event_type: str, **fields: Any) -> str:
    body = {"owning_application": "client-tests", "event_types": [event_type], **fields}
    response = httpx.post(f"{broker_url}/subscriptions", json=body, timeout=60)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _publish(broker_url: str, event_type: str, count: int) -> set[str]:
    events = order_events(count)
    response = httpx.post(f"{broker_url}/event-types/{event_type}/events", json=events, timeout=60)
    assert response.status_code == 200, response.text
    return {e["metadata"]["eid"] for e in events}


class Instance:
    """A consumer in a thread of its own, noting what it processed and from which
    partitions."""

    def __init__(self, consumer: Subscription) -> None:
        self.consumer = consumer
        self.eids: list[str] = []
        self.partitions: list[str] = []
        self._thread = threading.Thread(target=consumer.run, args=(self.handle,), daemon=True)
        self._thread.start()

    def handle(self, batch: EventBatch) -> None:
        self.eids += [e["metadata"]["eid"] for e in batch.events]
        self.partitions.append(batch.cursor.partition)

    def stop(self) -> None:
        self.consumer.stop()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive()
        self.consumer.close()


def _processed(instances: list[Instance]) -> Counter[str]:
    return Counter(eid for instance in instances for eid in instance.eids)


def _wait_for(instances: list[Instance], eids: set[str]) -> None:
    wait_until(lambda: eids <= _processed(instances).keys(), timeout=90, what=f"{len(eids)} events")


def test_two_instances_sharing_a_subscription_process_every_event_once_across_rebalances(
    broker_url: str, unique_name: Callable[[str], str]
) -> None:
    name = _event_type(broker_url, unique_name("orders"), partitions=4)
    subscription = _subscription(broker_url, name, read_from="begin")
    published = _publish(broker_url, name, 100)
    first = Instance(Subscription(broker_url, subscription, **FAST))
    _wait_for([first], published)

    second = Instance(Subscription(broker_url, subscription, **FAST))  # a rebalance: 2 + 2
    wait_until(lambda: second.consumer.stream_id is not None, timeout=30, what="a second stream")
    published |= _publish(broker_url, name, 200)
    _wait_for([first, second], published)
    after_join = len(first.eids)
    published |= _publish(broker_url, name, 200)
    _wait_for([first, second], published)
    assert len(first.eids) > after_join and second.eids  # both read while sharing
    assert set(first.partitions[-10:]).isdisjoint(second.partitions[-10:])

    first.stop()  # another rebalance: the second takes all four
    late = _publish(broker_url, name, 200)
    _wait_for([second], late)
    second.stop()
    published |= late

    processed = _processed([first, second])
    assert processed.keys() == published
    assert [eid for eid, times in processed.items() if times > 1] == []


def test_a_consumer_with_no_free_partition_waits_out_409_then_takes_over(
    broker_url: str, unique_name: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    name = _event_type(broker_url, unique_name("orders"), partitions=1)
    subscription = _subscription(broker_url, name, read_from="begin")
    published = _publish(broker_url, name, 20)
    first = Instance(Subscription(broker_url, subscription, **FAST))
    _wait_for([first], published)
    with caplog.at_level(logging.INFO, logger="changebroker.client"):
        second = Instance(Subscription(broker_url, subscription, **FAST))
        wait_until(
            lambda: any("No free slots" in r.getMessage() for r in caplog.records),
            timeout=30,
            what="the second consumer's 409",
        )
    first.stop()
    late = _publish(broker_url, name, 20)
    _wait_for([second], late)
    second.stop()
    published |= late

    processed = _processed([first, second])
    assert processed.keys() == published and set(processed.values()) == {1}
    assert len(second.eids) == 20


def _manifest(broker_url: str, event_type: str, directory: Path) -> Path:
    """A replay snapshot's manifest whose cursors are every partition's newest event now
    (replay/README.md "Snapshot format")."""
    partitions = httpx.get(f"{broker_url}/event-types/{event_type}/partitions", timeout=30).json()
    manifest = {
        "format": 1,
        "snapshot_id": directory.name,
        "created_at": "2026-11-23T14:05:01.123Z",
        "changeserver_sequence": None,
        "tables": {},
        "cursors": {
            event_type: [
                {"partition": p["partition"], "offset": p["newest_available_offset"]}
                for p in partitions
            ]
        },
    }
    directory.mkdir()
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def test_from_snapshot_streams_exactly_the_events_after_the_manifest(
    broker_url: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    name = _event_type(broker_url, unique_name("orders"), partitions=3)
    _publish(broker_url, name, 30)  # in the snapshot
    snapshot = _manifest(broker_url, name, tmp_path / "20261123T140501123Z-abc123")
    after = _publish(broker_url, name, 30)
    got: list[str] = []

    async def consume() -> AsyncSubscription:
        consumer = await AsyncSubscription.from_snapshot(
            broker_url, snapshot, "client-tests", **FAST
        )

        async def handle(batch: EventBatch) -> None:
            got.extend(e["metadata"]["eid"] for e in batch.events)
            if set(got) >= after:
                consumer.stop()

        async with consumer:
            await asyncio.wait_for(consumer.run(handle), timeout=90)
        return consumer

    consumer = asyncio.run(consume())

    assert sorted(got) == sorted(after)
    # The same snapshot again: the same subscription; another snapshot of the group: refused.
    again = Subscription.from_snapshot(broker_url, snapshot / "manifest.json", "client-tests")
    assert again.subscription_id == consumer.subscription_id
    _publish(broker_url, name, 1)
    later = _manifest(broker_url, name, tmp_path / "20261123T150000000Z-def456")
    with pytest.raises(SubscriptionRefused, match="exists and starts elsewhere"):
        Subscription.from_snapshot(
            broker_url, later, "client-tests", consumer_group=f"snapshot-{snapshot.name}"
        )
