"""The bridge as a writer of events through timeline switches: it pauses with the broker's
processes, goes on into the new topic on its own cluster, and stops a table whose event type
moved to another cluster (its events and position are one Kafka transaction) until an
operator brings it back; a subscription rebuilds the table exactly either way."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from changebroker.stack.processes import wait_until
from tests.broker.subscription_support import Stream, commit, create
from tests.broker.test_storages import storage
from tests.broker.test_timelines import switch
from tests.support.bridge_stack import Stack, table_rows
from tests.support.second_kafka import second_kafka

TABLE = "public.accounts"


class SubscriptionRebuild:
    """A subscription's consumer in a thread, rebuilding the table from its events by key
    (committing every batch), with every eid and cursor offset it read."""

    def __init__(self, broker_url: str, subscription_id: str) -> None:
        self._url = broker_url
        self._subscription_id = subscription_id
        self.rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.eids: list[str] = []
        self.offsets: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with httpx.Client(base_url=self._url, timeout=60) as client:
            stream = Stream(client, self._subscription_id, batch_flush_timeout=1, batch_limit=100)
            try:
                while not self._stop.is_set():
                    batch = stream.batch()
                    if batch is None:
                        return
                    if not batch.get("events"):
                        continue
                    with self._lock:
                        for event in batch["events"]:
                            self._apply(event)
                        self.offsets.append(batch["cursor"]["offset"])
                    answer = commit(client, self._subscription_id, stream.id, [batch["cursor"]])
                    assert answer.status_code in (200, 204), answer.text
            finally:
                stream.close()

    def _apply(self, event: dict[str, Any]) -> None:
        self.eids.append(event["metadata"]["eid"])
        key = (event["data"]["id"],)
        if event["data_op"] == "D":
            self.rows.pop(key, None)
        else:
            self.rows[key] = {**self.rows.get(key, {}), **event["data"]}

    def equals(self, stack: Stack) -> bool:
        with self._lock:
            return self.rows == table_rows(stack.app_dsn, TABLE)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


class Writes:
    """Updates to the table, one transaction each, until stopped."""

    def __init__(self, stack: Stack) -> None:
        self._stack = stack
        self.done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def more(self, changes: int) -> None:
        """Until ``changes`` more are made."""
        wanted = self.done + changes
        wait_until(lambda: self.done >= wanted, timeout=60, what=f"{changes} more changes")

    def _run(self) -> None:
        while not self._stop.is_set():
            self._stack.sql(
                "UPDATE accounts SET balance = balance + 1 WHERE id = %s", (self.done % 20 + 1,)
            )
            self.done += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def _bridged_table(stack: Stack, broker: httpx.Client) -> str:
    stack.sql("CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)")
    stack.sql("INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 20) g")
    name = stack.event_type(TABLE)
    wait_until(
        lambda: broker.get(f"/event-types/{name}").status_code == 200,
        timeout=60,
        what="the bridge to create the table's event type",
    )
    return name


def _timelines_read(reader: SubscriptionRebuild) -> set[int]:
    return {int(offset.split("-")[1], 16) for offset in reader.offsets}


def test_the_bridge_follows_switches_on_its_own_cluster(stack: Stack) -> None:
    stack.start_bridge()
    with httpx.Client(base_url=stack.broker_url, timeout=60) as broker:
        name = _bridged_table(stack, broker)
        reader = SubscriptionRebuild(
            stack.broker_url, create(broker, [name], read_from="begin")["id"]
        )
        writes = Writes(stack)
        try:
            for _ in range(2):
                writes.more(50)
                switch(broker, name)
            writes.more(50)
        finally:
            writes.stop()
        try:
            wait_until(lambda: reader.equals(stack), timeout=60, what="the rebuilt table")
        finally:
            reader.stop()
    assert len(reader.eids) == len(set(reader.eids)), "events published twice"
    assert _timelines_read(reader) == {1, 2, 3}


@pytest.fixture(scope="module")
def second_bootstrap() -> Iterator[str]:
    with second_kafka() as bootstrap:
        yield bootstrap


def test_a_table_moved_to_another_cluster_stops_until_it_is_back(
    stack: Stack, second_bootstrap: str, unique_name
) -> None:
    bridge = stack.start_bridge()
    with httpx.Client(base_url=stack.broker_url, timeout=60) as broker:
        other = unique_name("other")
        assert broker.post("/storages", json=storage(other, second_bootstrap)).status_code == 201
        name = _bridged_table(stack, broker)
        reader = SubscriptionRebuild(
            stack.broker_url, create(broker, [name], read_from="begin")["id"]
        )
        try:
            switch(broker, name, other)
            stack.sql("UPDATE accounts SET balance = 7 WHERE id = 1")
            wait_until(lambda: TABLE in bridge.stopped, timeout=60, what="the table to stop")
            assert "another Kafka cluster" in bridge.stopped[TABLE]
            stack.sql("UPDATE accounts SET balance = 8 WHERE id = 2")
            # The operator brings the event type back to the bridge's cluster and resumes.
            switch(broker, name, "default")
            resumed = httpx.post(f"{stack.bridge_url}/units/{TABLE}/resume", json={})
            assert resumed.status_code == 200, resumed.text
            wait_until(lambda: reader.equals(stack), timeout=60, what="the rebuilt table")
        finally:
            reader.stop()
    assert bridge.stopped == {}
    assert len(reader.eids) == len(set(reader.eids)), "events published twice"
    assert _timelines_read(reader) == {1, 3}
