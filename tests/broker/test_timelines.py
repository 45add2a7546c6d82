"""Timelines: a new topic takes over an event type's events, readers go on from the old one
into the new one, cursors name the timeline (``001-0002-...``), as Nakadi's TimelineService,
its timeline consumption tests and its cursor operations across timelines do."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
from confluent_kafka.admin import AdminClient

from changebroker import kafka
from changebroker.broker.streams.cursors import format_offset
from changebroker.stack.processes import wait_until
from tests.broker.stream_support import order, publish, read, stream_lines
from tests.broker.subscription_support import Stream, commit, create, reopened
from tests.broker.test_admin_settings import bearer, problem
from tests.support.event_types import business_event_type


def switch(client: httpx.Client, name: str, storage_id: str = "default") -> None:
    created = client.post(f"/event-types/{name}/timelines", json={"storage_id": storage_id})
    assert created.status_code == 201, created.text
    assert created.content == b""


def offsets(batches: list[dict[str, Any]]) -> list[str]:
    """The cursor offset of every batch with events (batch_limit 1: one per event)."""
    return [b["cursor"]["offset"] for b in batches if b.get("events")]


def read_offsets(client: httpx.Client, name: str, start: str, count: int) -> list[str]:
    return offsets(
        read(
            client,
            name,
            [{"partition": "0", "offset": start}],
            batch_limit=1,
            batch_flush_timeout=1,
            stream_limit=count,
            stream_timeout=60,
        )
    )


def reading(client: httpx.Client, name: str, count: int) -> tuple[threading.Thread, list[str]]:
    """A stream from BEGIN open in a thread until ``count`` events came (Nakadi's parallel
    consumer), and the offsets it read, once the thread ended."""
    during: list[str] = []
    consumer = threading.Thread(
        target=lambda: during.extend(read_offsets(client, name, "BEGIN", count)), daemon=True
    )
    consumer.start()
    return consumer, during


def orders(client: httpx.Client, name: str, count: int) -> None:
    publish(client, name, [order(f"{name}-{i}") for i in range(count)])


def topics_of(client: httpx.Client, name: str) -> list[str]:
    return [t["topic"] for t in client.get(f"/event-types/{name}/timelines").json()]


def existing_topics(bootstrap: str) -> set[str]:
    return set(AdminClient(kafka.client_config(bootstrap)).list_topics(timeout=30).topics)


def test_a_timeline_is_created_and_listed(client: httpx.Client, unique_name) -> None:
    retention = 2 * 24 * 3600 * 1000
    name = unique_name("listed")
    body = business_event_type(name, options={"retention_time": retention})
    assert client.post("/event-types", json=body).status_code == 201
    first_topic = topics_of(client, name)[0]
    orders(client, name, 3)
    before = datetime.now(UTC)
    switch(client, name)
    first, second = client.get(f"/event-types/{name}/timelines").json()
    common = {"id", "event_type", "order", "storage_id", "topic", "created_at", "switched_at"}
    assert set(first) == common | {"cleaned_up_at", "latest_position"}
    # What the active timeline does not have yet is left out (the spec's types take no null).
    assert set(second) == common
    assert (first["order"], second["order"]) == (1, 2)
    assert first["event_type"] == second["event_type"] == name
    assert first["storage_id"] == second["storage_id"] == "default"
    assert first["topic"] == first_topic != second["topic"]
    # The old timeline ends after the 3 events (offsets 0..2) and goes after its retention.
    assert first["latest_position"] == {"offsets": [2]}
    cleanup = datetime.fromisoformat(first["cleaned_up_at"])
    expected = before + timedelta(milliseconds=retention)
    assert abs((cleanup - expected).total_seconds()) < 60
    assert datetime.fromisoformat(second["switched_at"]) >= before - timedelta(seconds=5)
    # Publishing now writes to the new topic, continuing the positions of the partition.
    orders(client, name, 1)
    assert read_offsets(client, name, "BEGIN", 4)[-1] == format_offset(0, 2)
    # A longer retention moves the closed timeline's cleanup by the difference
    # (EventTypeAT.whenUpdateRetentionTimeThenUpdateInKafkaAndDB).
    current = client.get(f"/event-types/{name}").json()
    longer = {**current, "options": {"retention_time": 2 * retention}}
    assert client.put(f"/event-types/{name}", json=longer).status_code == 200
    moved = client.get(f"/event-types/{name}/timelines").json()[0]
    shift = datetime.fromisoformat(moved["cleaned_up_at"]) - cleanup
    assert shift == timedelta(milliseconds=retention)


def test_refusals_in_nakadis_words(client: httpx.Client, unique_name) -> None:
    name = unique_name("refused")
    assert client.post("/event-types", json=business_event_type(name)).status_code == 201
    missing = client.post("/event-types/nope/timelines", json={"storage_id": "default"})
    assert problem(missing, 404)["detail"] == 'EventType "nope" does not exist'
    assert problem(client.get("/event-types/nope/timelines"), 404)["detail"] == (
        'EventType "nope" does not exist'
    )
    unknown = client.post(f"/event-types/{name}/timelines", json={"storage_id": "nowhere"})
    assert problem(unknown, 422)["detail"] == "No storage with id: nowhere"
    assert problem(client.post(f"/event-types/{name}/timelines", json={}), 422)["detail"] == (
        "No storage with id: None"
    )
    compacted = unique_name("compacted")
    body = business_event_type(compacted, cleanup_policy="compact")
    assert client.post("/event-types", json=body).status_code == 201
    refused = client.post(f"/event-types/{compacted}/timelines", json={"storage_id": "default"})
    assert problem(refused, 422)["detail"] == (
        "It is not possible to create a timeline for event type with 'compact' cleanup_policy"
    )
    assert len(client.get(f"/event-types/{name}/timelines").json()) == 1


def test_a_stream_follows_switches_and_every_start_reads_on(
    client: httpx.Client, unique_name
) -> None:
    """Nakadi's TimelineConsumptionTest: a stream open across three switches, then reads from
    BEGIN and from every cursor in between."""
    name = unique_name("consumed")
    assert client.post("/event-types", json=business_event_type(name)).status_code == 201
    consumer, during = reading(client, name, 8)
    for _ in range(3):
        orders(client, name, 2)
        switch(client, name)
    orders(client, name, 2)
    consumer.join(timeout=60)
    expected = [format_offset(o, t) for t in (1, 2, 3, 4) for o in (0, 1)]
    assert during == expected
    for i in range(-1, len(expected) - 1):
        start = "BEGIN" if i == -1 else expected[i]
        assert read_offsets(client, name, start, len(expected) - 1 - i) == expected[i + 1 :]
    # Past the end of a closed timeline is no cursor of this event type.
    response, _ = stream_lines(
        client,
        name,
        [{"partition": "0", "offset": format_offset(4, 1)}],
        stream_timeout=1,
        batch_flush_timeout=1,
    )
    assert response.status_code == 412, response.text


def test_empty_timelines_in_a_row(client: httpx.Client, unique_name) -> None:
    """Nakadi's test2TimelinesInaRow: timelines that got no event are skipped."""
    name = unique_name("in_a_row")
    assert client.post("/event-types", json=business_event_type(name)).status_code == 201
    consumer, during = reading(client, name, 5)
    orders(client, name, 2)
    for _ in range(3):
        switch(client, name)
    orders(client, name, 1)
    switch(client, name)
    switch(client, name)
    orders(client, name, 2)
    consumer.join(timeout=60)
    expected = [
        format_offset(0, 1),
        format_offset(1, 1),
        format_offset(0, 4),
        format_offset(0, 6),
        format_offset(1, 6),
    ]
    assert during == expected
    assert read_offsets(client, name, "BEGIN", 5) == expected


def test_a_subscription_committed_in_the_old_timeline_goes_on_in_the_new_one(
    client: httpx.Client, unique_name
) -> None:
    name = unique_name("resumed")
    assert client.post("/event-types", json=business_event_type(name)).status_code == 201
    subscription_id = create(client, [name], read_from="begin")["id"]
    orders(client, name, 3)
    # A short commit timeout: the third event, sent and not committed, is free again soon.
    stream = Stream(client, subscription_id, batch_limit=1, batch_flush_timeout=1, commit_timeout=1)
    first = stream.read_events(2)
    answer = commit(client, subscription_id, stream.id, [first[-1]["cursor"]])
    assert answer.status_code == 204, answer.text
    stream.close()
    switch(client, name)
    orders(client, name, 2)
    cursors = client.get(f"/subscriptions/{subscription_id}/cursors").json()["items"]
    assert [c["offset"] for c in cursors] == [format_offset(1, 1)]
    # The third event of the old timeline once, then the new timeline's.
    stream = reopened(client, subscription_id, batch_limit=1, batch_flush_timeout=1)
    rest = stream.read_events(3)
    assert [b["cursor"]["offset"] for b in rest] == [
        format_offset(2, 1),
        format_offset(0, 2),
        format_offset(1, 2),
    ]
    assert [b["events"][0]["order_number"] for b in rest] == [
        f"{name}-2",
        f"{name}-0",
        f"{name}-1",
    ]
    answer = commit(client, subscription_id, stream.id, [rest[-1]["cursor"]])
    assert answer.status_code == 204, answer.text
    stream.close()
    (partition,) = client.get(f"/subscriptions/{subscription_id}/stats").json()["items"][0][
        "partitions"
    ]
    assert partition["unconsumed_events"] == 0
    cursors = client.get(f"/subscriptions/{subscription_id}/cursors").json()["items"]
    assert [c["offset"] for c in cursors] == [format_offset(1, 2)]


def test_cursor_operations_count_across_timelines(client: httpx.Client, unique_name) -> None:
    """Nakadi's CursorOperationsAT: lag, shifts and distances across timelines."""
    name = unique_name("operations")
    assert client.post("/event-types", json=business_event_type(name)).status_code == 201

    def lag(offset: str) -> dict[str, Any]:
        answer = client.post(
            f"/event-types/{name}/cursors-lag", json=[{"partition": "0", "offset": offset}]
        )
        assert answer.status_code == 200, answer.text
        (found,) = answer.json()
        return dict(found)

    def shifted(offset: str, by: int) -> str:
        answer = client.post(
            f"/event-types/{name}/shifted-cursors",
            json=[{"partition": "0", "offset": offset, "shift": by}],
        )
        assert answer.status_code == 200, answer.text
        return str(answer.json()[0]["offset"])

    orders(client, name, 2)
    switch(client, name)  # timeline 2 stays empty
    assert lag("BEGIN") == {
        "partition": "0",
        "oldest_available_offset": format_offset(0, 1),
        "newest_available_offset": format_offset(1, 1),
        "unconsumed_events": 2,
    }
    switch(client, name)
    orders(client, name, 2)
    assert lag("BEGIN")["newest_available_offset"] == format_offset(1, 3)
    assert lag("BEGIN")["unconsumed_events"] == 4
    switch(client, name)
    orders(client, name, 3)
    assert lag(format_offset(0, 1)) == {
        "partition": "0",
        "oldest_available_offset": format_offset(0, 1),
        "newest_available_offset": format_offset(2, 4),
        "unconsumed_events": 6,
    }
    assert shifted("BEGIN", 0) == "001-0001--1"
    assert shifted("BEGIN", 3) == format_offset(0, 3)
    assert shifted(format_offset(1, 3), -1) == format_offset(0, 3)
    assert shifted(format_offset(1, 3), -2) == "001-0003--1"
    assert shifted(format_offset(1, 3), -3) == format_offset(0, 1)
    assert shifted(format_offset(1, 1), 1) == format_offset(0, 3)
    distances = client.post(
        f"/event-types/{name}/cursor-distances",
        json=[
            {
                "initial_cursor": {"partition": "0", "offset": format_offset(0, 1)},
                "final_cursor": {"partition": "0", "offset": format_offset(2, 4)},
            },
            {
                "initial_cursor": {"partition": "0", "offset": format_offset(1, 1)},
                "final_cursor": {"partition": "0", "offset": "001-0002--1"},
            },
        ],
    )
    assert distances.status_code == 200, distances.text
    assert [d["distance"] for d in distances.json()] == [6, 0]
    (partition,) = client.get(f"/event-types/{name}/partitions").json()
    assert partition["newest_available_offset"] == format_offset(2, 4)
    unknown = client.post(
        f"/event-types/{name}/cursors-lag",
        json=[{"partition": "0", "offset": format_offset(0, 9)}],
    )
    assert "timeline 9 does not exist" in str(problem(unknown, 422)["detail"])


def test_deleting_an_event_type_deletes_every_timelines_topic(
    client: httpx.Client, kafka_bootstrap: str, unique_name
) -> None:
    name = unique_name("deleted")
    assert client.post("/event-types", json=business_event_type(name)).status_code == 201
    switch(client, name)
    switch(client, name)
    topics = topics_of(client, name)
    assert len(topics) == 3 and set(topics) <= existing_topics(kafka_bootstrap)
    assert client.delete(f"/event-types/{name}").status_code == 200
    # Kafka deletes a topic a moment after it accepted the deletion.
    wait_until(
        lambda: not set(topics) & existing_topics(kafka_bootstrap),
        timeout=30,
        what="every timeline's topic to go",
    )


def test_a_timeline_past_its_retention_loses_its_topic(
    client: httpx.Client, broker_dsn: str, kafka_bootstrap: str, unique_name
) -> None:
    name = unique_name("cleaned")
    assert client.post("/event-types", json=business_event_type(name)).status_code == 201
    orders(client, name, 2)
    switch(client, name)
    orders(client, name, 1)
    old_topic = topics_of(client, name)[0]
    # Its retention over (the broker looks every few seconds).
    with psycopg.connect(broker_dsn) as conn:
        conn.execute(
            "UPDATE broker_timelines SET cleanup_at = now() WHERE topic = %s", (old_topic,)
        )
    wait_until(
        lambda: old_topic not in existing_topics(kafka_bootstrap),
        timeout=60,
        what="the cleanup to delete the old topic",
    )
    assert len(client.get(f"/event-types/{name}/timelines").json()) == 2
    # What it held is gone: BEGIN is the new timeline's start; its cursors are unavailable.
    (partition,) = client.get(f"/event-types/{name}/partitions").json()
    assert partition["oldest_available_offset"] == format_offset(0, 2)
    assert read_offsets(client, name, "BEGIN", 1) == [format_offset(0, 2)]
    gone = client.post(
        f"/event-types/{name}/cursors-lag",
        json=[{"partition": "0", "offset": format_offset(0, 1)}],
    )
    assert "unavailable as retention time of data elapsed" in str(problem(gone, 422)["detail"])
    # The last cursor of the old timeline is the start of the new one: still good.
    assert read_offsets(client, name, format_offset(1, 1), 1) == [format_offset(0, 2)]


def test_only_administrators_create_or_list_timelines(
    administered: httpx.Client, unique_name: Callable[[str], str]
) -> None:
    secured = administered
    name = unique_name("guarded")
    body = business_event_type(name)
    assert secured.post("/event-types", json=body, headers=bearer("shop")).status_code == 201
    for method, json in [("GET", None), ("POST", {"storage_id": "default"})]:
        refused = secured.request(
            method, f"/event-types/{name}/timelines", json=json, headers=bearer("shop")
        )
        assert "not one of the broker's administrators" in str(problem(refused, 403)["detail"])
    assert (
        secured.post(
            f"/event-types/{name}/timelines", json={"storage_id": "default"}, headers=bearer("ops")
        ).status_code
        == 201
    )
    listed = secured.get(f"/event-types/{name}/timelines", headers=bearer("ops"))
    assert [t["order"] for t in listed.json()] == [1, 2]
