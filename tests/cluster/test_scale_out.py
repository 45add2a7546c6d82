"""The whole pipeline on a three-node Kafka cluster, two broker processes behind HAProxy.

A Kafka node SIGKILLed and restarted twice while publishers, a subscription client and the
bridge run: every event answered 200 is read back, commits go on, the bridge's events
rebuild the tables exactly, and the replay of the cluster's topics equals the database. A
broker process SIGKILLed mid-stream: its clients reconnect through the load balancer and go
on from their committed cursors.
"""

from __future__ import annotations

import collections
import contextlib
import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigResource
from pyspark.sql import SparkSession

from changebroker import kafka
from changebroker.bridge.transactions import POSITIONS_TOPIC
from changebroker.replay import run_replay
from changebroker.stack.processes import wait_until
from tests.broker.kafka_read import read_all, topic_of
from tests.broker.subscription_support import create
from tests.support.bank import TABLES as SCHEMA
from tests.support.bank import transfer
from tests.support.bridge_stack import rebuilding, table_rows
from tests.support.cluster import ClusterStack, kill_node, leader_of, restart_node
from tests.support.event_types import business_event_type, order_events
from tests.support.replay_snapshots import snapshot_tables

# The module's cluster and the session's Spark start inside the first test's time.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

TABLES = ["public.accounts", "public.transfers"]
PartitionKey = tuple[str, str]  # (event type, partition)


def _offset(cursor_offset: str) -> int:
    """The Kafka offset in a cursor's ``001-0001-000000000000000123``."""
    return int(cursor_offset.rsplit("-", 1)[1])


@dataclass
class Ledger:
    """What every client of one subscription received and committed, to check that a
    partition's events come without a gap and that nothing committed comes again."""

    eids: collections.Counter[str] = field(default_factory=collections.Counter)
    committed: dict[PartitionKey, int] = field(default_factory=dict)
    received: dict[PartitionKey, int] = field(default_factory=dict)
    commits: int = 0
    problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def delivered(self, key: PartitionKey, last: int, events: list[dict[str, Any]]) -> None:
        first = last - len(events) + 1  # a plain producer's offsets have no gaps
        with self.lock:
            if first <= self.committed.get(key, -1):
                self.problems.append(f"{key} from {first}: committed up to {self.committed[key]}")
            if first > self.received.get(key, -1) + 1:
                self.problems.append(f"{key} from {first}: a gap after {self.received.get(key)}")
            self.received[key] = max(self.received.get(key, -1), last)
            self.eids.update(event["metadata"]["eid"] for event in events)

    def commit(self, key: PartitionKey, offset: int) -> None:
        with self.lock:
            self.committed[key] = max(self.committed.get(key, -1), offset)
            self.commits += 1


class Reader(threading.Thread):
    """A subscription client through the load balancer: commits every batch, and opens a new
    stream whenever its stream ends or breaks, as Nakadi's clients do."""

    def __init__(self, url: str, subscription_id: str, ledger: Ledger) -> None:
        super().__init__(daemon=True)
        self.url, self.subscription_id, self.ledger = url, subscription_id, ledger
        self.stop = threading.Event()
        self.opened = threading.Event()  # a stream answered 200
        self.streams = 0

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            while not self.stop.is_set():
                self.streams += 1
                # A broken stream: a new one, from the committed cursors.
                with contextlib.suppress(httpx.HTTPError):
                    self._stream(client)
                self.stop.wait(0.2)

    def _stream(self, client: httpx.Client) -> None:
        params = {"batch_limit": 50, "batch_flush_timeout": 1, "max_uncommitted_events": 500}
        path = f"/subscriptions/{self.subscription_id}/events"
        with client.stream("GET", path, params=params) as response:
            if response.status_code != 200:
                return  # e.g. 409 while every partition is taken: try again
            stream_id = response.headers["X-Nakadi-StreamId"]
            self.opened.set()
            for line in response.iter_lines():
                if self.stop.is_set():
                    return
                batch = json.loads(line) if line else {}
                events = batch.get("events")
                if not events:
                    continue
                cursor = batch["cursor"]
                key = (cursor["event_type"], cursor["partition"])
                self.ledger.delivered(key, _offset(cursor["offset"]), events)
                if not self._commit(client, stream_id, cursor):
                    return

    def _commit(self, client: httpx.Client, stream_id: str, cursor: dict[str, Any]) -> bool:
        """Commit, retrying what a lost node or process refuses for a while; False when the
        stream is gone (a new one gets the partition from the committed cursor)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not self.stop.is_set():
            try:
                response = client.post(
                    f"/subscriptions/{self.subscription_id}/cursors",
                    json={"items": [cursor]},
                    headers={"X-Nakadi-StreamId": stream_id},
                )
            except httpx.HTTPError:
                self.stop.wait(0.1)
                continue
            if response.status_code in (200, 204):
                key = (cursor["event_type"], cursor["partition"])
                self.ledger.commit(key, _offset(cursor["offset"]))
                return True
            if response.status_code < 500:
                return False
            self.stop.wait(0.1)
        return False


class Publisher(threading.Thread):
    """Batches of 20 events through the load balancer, at most twenty a second (a refused
    one is not tried again at once: that would spin while a node is down); keeps the eids
    answered 200."""

    def __init__(self, url: str, event_type: str) -> None:
        super().__init__(daemon=True)
        self.url, self.event_type = url, event_type
        self.stop = threading.Event()
        self.acked: set[str] = set()
        self.refused = 0

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            while not self.stop.is_set():
                events = order_events(20)
                try:
                    response = client.post(f"/event-types/{self.event_type}/events", json=events)
                except httpx.HTTPError:
                    self.refused += 1
                else:
                    if response.status_code == 200:
                        self.acked.update(e["metadata"]["eid"] for e in events)
                    else:
                        self.refused += 1
                self.stop.wait(0.05)


def _bank_writes(dsn: str, stop: threading.Event, done: list[int]) -> None:
    """About ten transactions a second over both tables (updates, inserts, deletes): enough
    to keep the bridge committing through every kill, little enough for a quick replay."""
    rng = random.Random(11)
    with psycopg.connect(dsn) as conn:
        while not stop.wait(0.1):
            transfer(conn, rng, range(1, 51))
            if rng.random() < 0.1:
                conn.execute("DELETE FROM transfers WHERE id %% 7 = %s", (rng.randint(0, 6),))
            conn.commit()
            done[0] += 1


def _event_type(client: httpx.Client, name: str, partitions: int) -> None:
    statistic = {
        "messages_per_minute": 1000,
        "message_size": 5,
        "read_parallelism": partitions,
        "write_parallelism": partitions,
    }
    body = business_event_type(name, default_statistic=statistic)
    response = client.post("/event-types", json=body)
    assert response.status_code == 201, response.text


def _replication(bootstrap: str, topic: str) -> tuple[set[int], str]:
    """The replica counts of the topic's partitions, and its min.insync.replicas, once the
    node asked knows the topic (a new topic reaches each node's metadata in its time)."""
    admin = kafka.admin(bootstrap)
    found: list[tuple[set[int], str]] = []

    def described() -> bool:
        try:
            metadata = admin.list_topics(topic, timeout=10).topics[topic]
            resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
            configs = admin.describe_configs([resource])[resource].result(timeout=10)
        except KafkaException as error:
            if error.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
            return False
        if metadata.error is not None:
            return False
        replicas = {len(p.replicas) for p in metadata.partitions.values()}
        found.append((replicas, configs["min.insync.replicas"].value))
        return True

    wait_until(described, timeout=30, what=f"the cluster to describe {topic}")
    return found[0]


def test_a_kafka_node_killed_twice_under_load_loses_nothing(
    cluster_stack: ClusterStack,
    unique_name: Callable[[str], str],
    spark: SparkSession,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    stack, cluster = cluster_stack.stack, cluster_stack.cluster
    stack.sql(SCHEMA)
    bridge = stack.bridge_process().start(timeout=120)
    request.addfinalizer(bridge.stop)  # a failed or timed-out test leaves no bridge behind
    name = unique_name("orders")
    with httpx.Client(base_url=stack.broker_url, timeout=60) as client:
        _event_type(client, name, partitions=3)
        subscription = create(client, [name], read_from="begin")
    topic, _ = topic_of(stack.meta_dsn, name)
    # Three copies, two in sync before an acknowledgement, without anyone asking.
    assert _replication(cluster.bootstrap, topic) == ({3}, "2")
    assert _replication(cluster.bootstrap, POSITIONS_TOPIC) == ({3}, "2")

    ledger = Ledger()
    publishers = [Publisher(stack.broker_url, name) for _ in range(2)]
    reader = Reader(stack.broker_url, subscription["id"], ledger)
    stop_writing, written = threading.Event(), [0]
    writer = threading.Thread(target=_bank_writes, args=(stack.app_dsn, stop_writing, written))
    for thread in [*publishers, reader, writer]:
        thread.start()

    def bridge_events() -> int:
        return sum(unit["events"] for unit in stack.status()["units"].values())

    def progressed() -> Callable[[], bool]:
        """Publishing, commits and the bridge all moved on from now."""
        start = (sum(len(p.acked) for p in publishers), ledger.commits, bridge_events())

        def now() -> bool:
            current = (sum(len(p.acked) for p in publishers), ledger.commits, bridge_events())
            return all(c > s for c, s in zip(current, start, strict=True))

        return now

    try:
        wait_until(progressed(), timeout=60, what="publishing, commits and the bridge")
        # The node leading the bridge's positions, then one leading the published topic.
        first = leader_of(cluster.bootstrap, POSITIONS_TOPIC)
        others = [leader_of(cluster.bootstrap, topic, p) for p in range(3)]
        second = next((n for n in others if n != first), first % cluster.nodes + 1)
        for victim in (first, second):
            kill_node(cluster, victim)
            nodes = cluster_stack.up.status()["kafka"]["nodes"]
            assert [node["node_id"] for node in nodes if node["pid"] is None] == [victim]
            wait_until(progressed(), timeout=120, what=f"everything to go on without {victim}")
            restart_node(cluster, victim)
            wait_until(progressed(), timeout=60, what=f"everything to go on with {victim} back")
    finally:
        for publisher in publishers:
            publisher.stop.set()
        for publisher in publishers:
            publisher.join(timeout=90)
        stop_writing.set()
        writer.join(timeout=60)

    acked = set().union(*(p.acked for p in publishers))
    assert len(acked) > 500 and written[0] > 50
    wait_until(
        lambda: acked <= ledger.eids.keys(),
        timeout=120,
        what="every event answered 200 to be read from the subscription",
    )
    reader.stop.set()
    reader.join(timeout=60)
    assert ledger.problems == []
    stored = read_all(cluster.bootstrap, topic, 3)
    eids = collections.Counter(s.event["metadata"]["eid"] for s in stored)
    assert [eid for eid, count in eids.items() if count > 1] == []

    with rebuilding(stack) as rebuilt:
        wait_until(lambda: rebuilt.equals_database(TABLES), timeout=120, what="rebuilt tables")
        assert rebuilt.duplicate_eids() == []
    bridge.stop()

    options = stack.replay_options(tmp_path / "snapshots", kafka_bootstrap=cluster.bootstrap)
    manifest = run_replay(options, spark)
    expected = {table: table_rows(stack.app_dsn, table) for table in TABLES}
    assert snapshot_tables(spark, manifest) == expected


def test_a_broker_process_killed_mid_stream_its_clients_go_on_from_their_cursors(
    cluster_stack: ClusterStack, unique_name: Callable[[str], str]
) -> None:
    stack, fleet = cluster_stack.stack, cluster_stack.fleet
    name = unique_name("orders")
    with httpx.Client(base_url=stack.broker_url, timeout=60) as client:
        _event_type(client, name, partitions=4)
        subscription = create(client, [name], read_from="begin")
    ledger = Ledger()
    publisher = Publisher(stack.broker_url, name)
    # Two streams opened one after the other before any other request: round robin puts
    # one on each process.
    readers = [Reader(stack.broker_url, subscription["id"], ledger) for _ in range(2)]
    for reader in readers:
        reader.start()
        wait_until(reader.opened.is_set, timeout=60, what="a stream to open")
    publisher.start()

    def committed_more(than: int) -> Callable[[], bool]:
        return lambda: ledger.commits > than + 20

    try:
        wait_until(committed_more(0), timeout=60, what="both streams to commit")
        fleet.processes[0].kill()
        killed_at = ledger.commits
        wait_until(
            lambda: any(reader.streams > 1 for reader in readers),
            timeout=30,
            what="a client to lose its stream",
        )
        wait_until(committed_more(killed_at), timeout=90, what="commits after the kill")
    finally:
        publisher.stop.set()
        publisher.join(timeout=90)
    wait_until(
        lambda: publisher.acked <= ledger.eids.keys(),
        timeout=120,
        what="every event answered 200 to be read",
    )
    for reader in readers:
        reader.stop.set()
        reader.join(timeout=60)
    assert ledger.problems == []
    assert len(ledger.received) == 4  # every partition was read
