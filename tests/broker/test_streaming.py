"""The low-level stream ``GET /event-types/{name}/events`` through the real app, on real Kafka."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable
from typing import Any

import httpx

from changebroker.broker.streams import event_stream
from changebroker.stack.processes import wait_until
from tests.broker.stream_support import (
    OFFSET_PATTERN,
    batches,
    order,
    publish,
    read,
    stream_lines,
    two_partition_type,
)
from tests.broker.swagger import assert_problem

BEGIN = [{"partition": "0", "offset": "begin"}]


def test_manual_reading_two_published_events_from_begin(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = make_event_type()
    sent = [order("24873243241"), order("24873243242")]
    publish(client, name, sent)

    got = read(client, name, BEGIN, stream_limit=2)

    # batch_limit defaults to 1: one event per batch, the cursor naming it.
    assert [b["cursor"] for b in got] == [
        {"partition": "0", "offset": "001-0001-000000000000000000"},
        {"partition": "0", "offset": "001-0001-000000000000000001"},
    ]
    events = [e for b in got for e in b["events"]]
    assert [e["order_number"] for e in events] == ["24873243241", "24873243242"]
    assert [e["metadata"]["eid"] for e in events] == [e["metadata"]["eid"] for e in sent]
    assert all(e["metadata"]["event_type"] == name for e in events)
    assert all(re.match(OFFSET_PATTERN, b["cursor"]["offset"]) for b in got)


def test_cursors_are_exclusive_and_begin_is_any_case(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = make_event_type()
    publish(client, name, [order("1"), order("2"), order("3")])

    after_first = read(
        client, name, [{"partition": "0", "offset": "001-0001-000000000000000000"}], stream_limit=2
    )
    assert [e["order_number"] for b in after_first for e in b["events"]] == ["2", "3"]

    upper = read(
        client, name, [{"partition": "0", "offset": "BEGIN"}], batch_limit=3, stream_limit=3
    )
    assert [e["order_number"] for b in upper for e in b["events"]] == ["1", "2", "3"]
    assert upper[0]["cursor"]["offset"] == "001-0001-000000000000000002"


def test_keep_alives_carry_the_cursor_and_no_events(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """The manual's keep-alive example; on an empty partition ``begin`` is ``001-0001--1``."""
    name = make_event_type()
    response, lines = stream_lines(
        client, name, BEGIN, batch_flush_timeout=0.1, stream_keep_alive_limit=3
    )
    assert response.status_code == 200
    assert lines == [b'{"cursor":{"partition":"0","offset":"001-0001--1"}}'] * 3
    batches(lines)

    publish(client, name, [order("7")])
    got = read(client, name, BEGIN, batch_flush_timeout=0.1, stream_keep_alive_limit=2)
    assert got[0]["events"][0]["order_number"] == "7"
    assert got[1:] == [{"cursor": {"partition": "0", "offset": "001-0001-000000000000000000"}}] * 2


def test_without_cursors_the_stream_starts_at_the_newest_event_of_every_partition(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = two_partition_type(make_event_type)
    publish(client, name, [order("a", "0"), order("b", "1"), order("c", "1")])

    got = read(client, name, batch_flush_timeout=0.1, stream_keep_alive_limit=1)

    assert sorted(json.dumps(b, sort_keys=True) for b in got) == sorted(
        json.dumps({"cursor": c}, sort_keys=True)
        for c in [
            {"partition": "0", "offset": "001-0001-000000000000000000"},
            {"partition": "1", "offset": "001-0001-000000000000000001"},
        ]
    )


def test_batches_are_per_partition_and_stream_limit_counts_all_partitions(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = two_partition_type(make_event_type)
    publish(client, name, [order(str(i), str(i % 2)) for i in range(10)])
    cursors = [{"partition": "0", "offset": "begin"}, {"partition": "1", "offset": "begin"}]

    got = read(client, name, cursors, batch_limit=2, stream_limit=10)

    by_partition: dict[str, list[str]] = {"0": [], "1": []}
    for batch in got:
        numbers = [e["order_number"] for e in batch["events"]]
        assert 1 <= len(numbers) <= 2
        assert {int(n) % 2 for n in numbers} == {int(batch["cursor"]["partition"])}
        by_partition[batch["cursor"]["partition"]] += numbers
    assert by_partition == {"0": ["0", "2", "4", "6", "8"], "1": ["1", "3", "5", "7", "9"]}
    assert {b["cursor"]["offset"] for b in got if b["cursor"]["partition"] == "0"} >= {
        "001-0001-000000000000000004"
    }


def test_a_partial_batch_is_flushed_at_stream_limit_and_at_stream_timeout(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = make_event_type()
    publish(client, name, [order(str(i)) for i in range(5)])

    got = read(client, name, BEGIN, batch_limit=2, stream_limit=5)
    assert [len(b["events"]) for b in got] == [2, 2, 1]
    assert got[-1]["cursor"]["offset"] == "001-0001-000000000000000004"

    timed = read(client, name, BEGIN, batch_limit=100, batch_flush_timeout=1, stream_timeout=1)
    assert [e["order_number"] for b in timed for e in b.get("events", [])] == list("01234")


def test_gzip_when_the_client_accepts_it(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = make_event_type()
    publish(client, name, [order("z")])
    headers = {"X-Nakadi-Cursors": json.dumps(BEGIN), "Accept-Encoding": "gzip"}
    with client.stream(
        "GET", f"/event-types/{name}/events", params={"stream_limit": 1}, headers=headers
    ) as response:
        raw = b"".join(response.iter_raw())
    assert response.headers["content-encoding"] == "gzip"
    got = batches(gzip.decompress(raw).splitlines())
    assert got[0]["events"][0]["order_number"] == "z"


def test_a_client_going_away_closes_its_consumer(
    broker_url: str, make_event_type: Callable[..., str]
) -> None:
    name = make_event_type()
    with httpx.Client(base_url=broker_url, timeout=30) as http:
        headers = {"X-Nakadi-Cursors": json.dumps(BEGIN)}
        with http.stream(
            "GET",
            f"/event-types/{name}/events",
            params={"batch_flush_timeout": 0.1},
            headers=headers,
        ) as response:
            first = next(response.iter_lines())
            assert json.loads(first) == {"cursor": {"partition": "0", "offset": "001-0001--1"}}
            assert event_stream.open_streams >= 1
    wait_until(
        lambda: event_stream.open_streams == 0, timeout=30, what="the stream's consumer to close"
    )


def test_events_published_while_streaming_arrive_on_the_open_stream(
    client: httpx.Client, broker_url: str, make_event_type: Callable[..., str]
) -> None:
    name = make_event_type()
    with (
        httpx.Client(base_url=broker_url, timeout=30) as http,
        http.stream(
            "GET",
            f"/event-types/{name}/events",
            params={"batch_flush_timeout": 0.1, "stream_limit": 1},
        ) as response,
    ):
        lines = response.iter_lines()
        # The first keep-alive proves the stream is assigned before the event is published.
        assert json.loads(next(lines)) == {"cursor": {"partition": "0", "offset": "001-0001--1"}}
        publish(client, name, [order("live")])
        rest = [json.loads(line) for line in lines]
    with_events = [b for b in rest if "events" in b]
    assert [e["order_number"] for b in with_events for e in b["events"]] == ["live"]
    assert with_events[0]["cursor"] == {"partition": "0", "offset": "001-0001-000000000000000000"}


def test_unknown_event_type_is_404(client: httpx.Client) -> None:
    # Nakadi's words for the stream (its EventStreamReadingAT), not the event type's.
    response, _ = stream_lines(client, "no.such.type", BEGIN)
    assert assert_problem(response, 404) == "topic not found"


def test_cursor_errors_are_412_with_nakadi_texts(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = make_event_type()
    publish(client, name, [order("1")])

    def problem_for(cursors: list[dict[str, str]], status: int, detail: str) -> None:
        response, _ = stream_lines(client, name, cursors)
        assert_problem(response, status, detail)

    problem_for([{"partition": "7", "offset": "begin"}], 412, "non existing partition 7")
    problem_for(
        [{"partition": "0", "offset": "001-0001-xyz"}],
        412,
        "invalid cursor format, partition: 0 offset: 001-0001-xyz",
    )
    problem_for(
        [{"partition": "0", "offset": "001-0001-000000000000000005"}],
        412,
        "invalid offset 001-0001-000000000000000005 for partition 0",
    )
    problem_for([{"partition": "0"}], 412, "offset must not be null")
    problem_for([{"offset": "begin"}], 412, "partition must not be null")
    response, _ = stream_lines(client, name, headers={"X-Nakadi-Cursors": "[{"})
    assert_problem(response, 400, "incorrect syntax of X-nakadi-cursors header")


def test_limits_that_contradict_each_other_are_422(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = make_event_type()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"batch_limit": 0}, "batch_limit can't be lower than 1"),
        ({"batch_limit": 5, "stream_limit": 2}, "stream_limit can't be lower than batch_limit"),
        (
            {"batch_flush_timeout": 10, "stream_timeout": 5},
            "stream_timeout can't be lower than batch_flush_timeout",
        ),
        ({"batch_limit": "many"}, "batch_limit must be a number"),
    ]
    for params, detail in cases:
        response, _ = stream_lines(client, name, BEGIN, **params)
        assert_problem(response, 422, detail)
