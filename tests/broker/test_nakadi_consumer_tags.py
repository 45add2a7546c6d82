"""``X-CONSUMER-TAG: consumer_subscription_id=<uuid>`` on a publish: the events are for that
subscription only. As Nakadi's ``SubscriptionConsumptionTest.testBlockedEventsNotConsumedJson``
and ``...Avro`` read them, and its publishing controller refuses a malformed tag; on the real
broker and Kafka."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from changebroker.broker.streams.cursors import format_offset
from tests.broker.stream_support import order, read
from tests.broker.subscription_support import Stream, create
from tests.broker.swagger import assert_problem
from tests.broker.test_nakadi_avro import AVRO, avro_batch
from tests.broker.test_nakadi_avro import moved_to_avro as moved_to_avro  # fixture

HEADER = "X-CONSUMER-TAG"
SOMEONE_ELSE = "16120729-4a57-4607-ad3a-d526a4590e75"


def _tagged(subscription_id: str) -> dict[str, str]:
    return {HEADER: f"consumer_subscription_id={subscription_id}"}


def _publish(client: httpx.Client, name: str, headers: dict[str, str] | None = None) -> None:
    answer = client.post(f"/event-types/{name}/events", json=[order("1")], headers=headers)
    assert answer.status_code == 200, answer.text


def _offsets_read(client: httpx.Client, subscription_id: str) -> list[str]:
    """The offsets of the events a stream of the subscription sends before it times out."""
    stream = Stream(client, subscription_id, batch_limit=1, stream_timeout=2, batch_flush_timeout=1)
    try:
        return [b["cursor"]["offset"] for b in stream.until_end() if b.get("events")]
    finally:
        stream.close()


@pytest.mark.parametrize(
    ("header", "detail"),
    [
        ("", "X-CONSUMER-TAG: is empty!"),
        ("consumer_subscription_id=123f", "header tag value: 123f is not an UUID"),
        (
            "consumer_subscription_id=,",
            "header tag parameter is imbalanced, expected: 2 but provided 1",
        ),
        (
            f"consumer_subscription_id={SOMEONE_ELSE},  consumer_subscription_id = {SOMEONE_ELSE}",
            "duplicate header tag: CONSUMER_SUBSCRIPTION_ID",
        ),
        ("owner=me", "invalid header tag: owner"),
        ("debug_publisher_topic_id=x", "header tag unsupported: debug_publisher_topic_id"),
    ],
)
def test_a_malformed_tag_is_refused_with_nakadis_words_and_publishes_nothing(
    client: httpx.Client, make_event_type: Callable[..., str], header: str, detail: str
) -> None:
    name = make_event_type()
    before = client.get(f"/event-types/{name}/partitions").json()
    answer = client.post(f"/event-types/{name}/events", json=[order("1")], headers={HEADER: header})
    assert assert_problem(answer, 422) == detail
    assert client.get(f"/event-types/{name}/partitions").json() == before


def test_a_subscription_gets_the_events_tagged_for_it_and_untagged_ones_only(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = make_event_type()
    first = create(client, [name], read_from="begin")["id"]
    _publish(client, name)
    _publish(client, name, _tagged(SOMEONE_ELSE))
    assert _offsets_read(client, first) == [format_offset(0)]

    cursor = {"event_type": name, "partition": "0", "offset": format_offset(1)}
    second = create(
        client, [name], consumer_group="second", read_from="cursors", initial_cursors=[cursor]
    )["id"]
    _publish(client, name)
    _publish(client, name, _tagged(second))
    assert _offsets_read(client, second) == [format_offset(2), format_offset(3)]


def test_avro_published_with_a_tag_is_for_that_subscription_only(
    client: httpx.Client, moved_to_avro: str
) -> None:
    name = moved_to_avro
    mine = create(client, [name], read_from="begin")["id"]
    for subscription_id in (None, SOMEONE_ELSE, mine):
        answer = client.post(
            f"/event-types/{name}/events",
            content=avro_batch(name, "2.0.0", "x"),
            headers={**AVRO, **(_tagged(subscription_id) if subscription_id else {})},
        )
        assert answer.status_code == 200, answer.text
    assert _offsets_read(client, mine) == [format_offset(0), format_offset(2)]


def test_a_low_level_stream_skips_every_tagged_event(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = make_event_type()
    _publish(client, name)
    _publish(client, name, _tagged(SOMEONE_ELSE))
    _publish(client, name)
    cursors = [{"partition": "0", "offset": "BEGIN"}]
    got: list[dict[str, Any]] = read(
        client, name, cursors, batch_limit=1, stream_timeout=2, batch_flush_timeout=1
    )
    assert [b["cursor"]["offset"] for b in got if b.get("events")] == [
        format_offset(0),
        format_offset(2),
    ]
