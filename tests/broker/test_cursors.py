"""Cursor operations: cursor-distances, cursors-lag, shifted-cursors; expired offsets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from confluent_kafka import TopicPartition

from changebroker import kafka
from tests.broker.kafka_read import topic_of
from tests.broker.stream_support import order, publish, stream_lines, two_partition_type
from tests.broker.swagger import assert_problem, validate


def offset(n: int) -> str:
    return f"001-0001-{n:018d}"


def cursor(partition: str, at: str) -> dict[str, str]:
    return {"partition": partition, "offset": at}


def _with_orders(client: httpx.Client, make_event_type: Callable[..., str], count: int) -> str:
    """A new event type with ``count`` orders published to it."""
    name = make_event_type()
    publish(client, name, [order(str(i)) for i in range(count)])
    return name


def test_distances_count_events_after_the_initial_cursor(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = _with_orders(client, make_event_type, 4)
    queries = [
        {"initial_cursor": cursor("0", "begin"), "final_cursor": cursor("0", offset(3))},
        {"initial_cursor": cursor("0", offset(1)), "final_cursor": cursor("0", offset(1))},
        {"initial_cursor": cursor("0", offset(3)), "final_cursor": cursor("0", offset(0))},
        {"initial_cursor": cursor("0", "001-0001--1"), "final_cursor": cursor("0", offset(0))},
    ]

    response = client.post(f"/event-types/{name}/cursor-distances", json=queries)

    assert response.status_code == 200, response.text
    validate("CursorDistanceResult", response.json(), array=True)
    assert [r["distance"] for r in response.json()] == [4, 0, -3, 1]
    assert [(r["initial_cursor"], r["final_cursor"]) for r in response.json()] == [
        (q["initial_cursor"], q["final_cursor"]) for q in queries
    ]


def test_lag_of_each_cursor(client: httpx.Client, make_event_type: Callable[..., str]) -> None:
    name = two_partition_type(make_event_type)
    publish(client, name, [order("a", "0"), order("b", "0"), order("c", "1")])

    response = client.post(
        f"/event-types/{name}/cursors-lag",
        json=[cursor("1", "begin"), cursor("0", offset(0))],
    )

    assert response.status_code == 200, response.text
    validate("Partition", response.json(), array=True)
    assert response.json() == [
        {
            "partition": "1",
            "oldest_available_offset": offset(0),
            "newest_available_offset": offset(0),
            "unconsumed_events": 1,
        },
        {
            "partition": "0",
            "oldest_available_offset": offset(0),
            "newest_available_offset": offset(1),
            "unconsumed_events": 1,
        },
    ]


def test_shifted_cursors_keep_the_request_order(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = _with_orders(client, make_event_type, 5)
    shifts = [
        {**cursor("0", offset(1)), "shift": 2},
        {**cursor("0", offset(1)), "shift": -2},
        {**cursor("0", "begin"), "shift": 5},
        {**cursor("0", offset(4)), "shift": 0},
        # Past the newest event: on in the active timeline, as Nakadi's CursorOperationsAT
        # (unshiftCursor) expects.
        {**cursor("0", "begin"), "shift": 7},
    ]

    response = client.post(f"/event-types/{name}/shifted-cursors", json=shifts)

    assert response.status_code == 200, response.text
    validate("Cursor", response.json(), array=True)
    assert response.json() == [
        cursor("0", offset(3)),
        cursor("0", "001-0001--1"),
        cursor("0", offset(4)),
        cursor("0", offset(4)),
        cursor("0", offset(6)),
    ]


def test_cursor_operation_errors_are_422_and_404(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = make_event_type()
    publish(client, name, [order("1"), order("2")])
    cases: list[tuple[str, Any, str]] = [
        (
            "cursor-distances",
            [{"initial_cursor": cursor("0", "begin"), "final_cursor": cursor("1", "begin")}],
            "non existing partition 1",
        ),
        (
            "cursor-distances",
            [{"initial_cursor": cursor("\u00b2", "begin"), "final_cursor": cursor("0", "begin")}],
            "non existing partition \u00b2",
        ),
        (
            "cursor-distances",
            [{"initial_cursor": cursor("0", "bad"), "final_cursor": cursor("0", "begin")}],
            "invalid cursor format, partition: 0 offset: bad",
        ),
        (
            "cursor-distances",
            [{"initial_cursor": cursor("0", "begin")}],
            "final_cursor is required",
        ),
        ("cursors-lag", [cursor("0", offset(2))], f"invalid offset {offset(2)} for partition 0"),
        ("cursors-lag", {"partition": "0"}, "must be a JSON array"),
        ("shifted-cursors", [{**cursor("0", "begin"), "shift": -1}], "leaves the available range"),
        ("shifted-cursors", [{**cursor("0", "begin"), "shift": "one"}], "whole number shift"),
    ]
    for operation, body, detail in cases:
        response = client.post(f"/event-types/{name}/{operation}", json=body)
        assert_problem(response, 422, detail)
    assert_problem(
        client.post("/event-types/no.such.type/cursors-lag", json=[cursor("0", "begin")]),
        404,
        'EventType "no.such.type" does not exist.',
    )
    assert_problem(
        client.post(
            f"/event-types/{name}/shifted-cursors",
            content=b"[{",
            headers={"Content-Type": "application/json"},
        ),
        400,
    )


def test_distances_across_partitions_are_refused(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = two_partition_type(make_event_type)
    query = [{"initial_cursor": cursor("0", "begin"), "final_cursor": cursor("1", "begin")}]
    response = client.post(f"/event-types/{name}/cursor-distances", json=query)
    assert_problem(response, 422, "cursors with different partition")


def test_expired_offsets_are_412_for_streams_and_begin_moves_past_them(
    client: httpx.Client, make_event_type: Callable[..., str], broker_dsn: str, kafka_bootstrap: str
) -> None:
    """Retention is simulated by deleting the first two records, as retention would."""
    name = _with_orders(client, make_event_type, 4)
    topic, _ = topic_of(broker_dsn, name)
    admin = kafka.admin(kafka_bootstrap)  # kept referenced: its futures resolve through it
    deleted = admin.delete_records([TopicPartition(topic, 0, 2)])
    for future in deleted.values():
        future.result(timeout=30)

    response, _ = stream_lines(client, name, [cursor("0", offset(0))])
    assert_problem(
        response,
        412,
        f"offset {offset(0)} for partition 0 event type {name} is unavailable as retention time"
        " of data elapsed. PATCH partition offset with valid and available offset",
    )
    assert_problem(
        client.post(f"/event-types/{name}/cursors-lag", json=[cursor("0", offset(0))]),
        422,
        "is unavailable as retention time of data elapsed",
    )
    # The cursor just before the oldest held event is still valid: it is what begin means.
    response, lines = stream_lines(client, name, [cursor("0", "begin")], stream_limit=2)
    assert response.status_code == 200
    assert [line.count(b'"order_number"') for line in lines] == [1, 1]
    assert b'"order_number":"2"' in lines[0]
    partition = client.get(f"/event-types/{name}/partitions/0").json()
    assert partition["oldest_available_offset"] == offset(2)
    lag = client.get(
        f"/event-types/{name}/partitions/0", params={"consumed_offset": offset(1)}
    ).json()
    assert lag["unconsumed_events"] == 2
