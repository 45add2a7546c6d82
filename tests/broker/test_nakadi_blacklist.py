"""The blacklist with authentication off, as Nakadi's acceptance tests (``HilaAT``,
``EventStreamReadingAT``, ``BlockEventPublishingAT``) read it: an event type's block holds for
whoever calls. On the real broker and Kafka.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from tests.broker.stream_support import order, publish, stream_lines
from tests.broker.subscription_support import Stream, commit, create, published
from tests.broker.swagger import assert_problem

EVENT_TYPE_BLOCKED = "Application or event type is blocked"
SUBSCRIPTION_BLOCKED = "Application or subscription is blocked"
FAST: dict[str, Any] = {"batch_flush_timeout": 0.2}


@contextmanager
def blocked(client: httpx.Client, kind: str, name: str) -> Iterator[None]:
    """``PUT /settings/blacklist/{kind}/{name}`` for the block, its DELETE after."""
    assert client.put(f"/settings/blacklist/{kind}/{name}").status_code == 204
    try:
        yield
    finally:
        assert client.delete(f"/settings/blacklist/{kind}/{name}").status_code == 204


def test_a_producer_block_refuses_publishing(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi: after PUT /settings/blacklist/PRODUCER_ET/{et}, POST /event-types/{et}/events
    answers 403 "Application or event type is blocked"; after the DELETE, 200. Before, the
    block was stored and publishing went on."""
    name = make_event_type()
    with blocked(client, "PRODUCER_ET", name):
        refused = client.post(f"/event-types/{name}/events", json=[order("1")])
        assert assert_problem(refused, 403) == EVENT_TYPE_BLOCKED
    publish(client, name, [order("1")])


def test_a_consumer_block_refuses_both_streams_and_commits(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi (whenReadEventsForBlockedConsumerThen403, whenConsumerIsBlocked403): after PUT
    /settings/blacklist/CONSUMER_ET/{et}, the low-level and the subscription stream answer 403
    "Application or event type is blocked", a commit 403 "Application or subscription is
    blocked"; after the DELETE, 200 again."""
    name, sid = published(client, make_event_type, 1)
    stream = Stream(client, sid, **FAST)
    (batch,) = stream.read_events(1)
    with blocked(client, "CONSUMER_ET", name):
        response, _ = stream_lines(client, name, stream_timeout=1, batch_flush_timeout=1)
        assert assert_problem(response, 403) == EVENT_TYPE_BLOCKED
        refused = Stream(client, sid, **FAST)
        assert assert_problem(refused.response, 403) == EVENT_TYPE_BLOCKED
        answer = commit(client, sid, stream.id, [batch["cursor"]])
        assert assert_problem(answer, 403) == SUBSCRIPTION_BLOCKED
        cursors = client.get(f"/subscriptions/{sid}/cursors")
        assert assert_problem(cursors, 403) == SUBSCRIPTION_BLOCKED
    stream.close()
    response, lines = stream_lines(client, name, stream_timeout=1, batch_flush_timeout=1)
    assert response.status_code == 200 and lines
    again = Stream(client, sid, **FAST)
    assert again.status_code == 200
    again.close()


def test_a_consumer_block_closes_open_streams(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi (whenConsumerIsBlockedDuringConsumption): a subscription stream that read 5 events
    gets a 6th batch saying "Consumption is blocked" when its event type is blocked, and ends;
    an open low-level stream ends too, within the settings' refresh. Before, both went on."""
    name = make_event_type()
    sid = create(client, [name], read_from="begin")["id"]
    publish(client, name, [order(str(i)) for i in range(5)])
    # Bounded, so that a stream the block does not end fails the test rather than hanging it.
    bounded: dict[str, Any] = {"batch_flush_timeout": 0.2, "stream_timeout": 30}
    stream = Stream(client, sid, max_uncommitted_events=10, **bounded)
    stream.read_events(5)
    with (
        client.stream("GET", f"/event-types/{name}/events", params=bounded) as low_level,
        blocked(client, "CONSUMER_ET", name),
    ):
        started = time.monotonic()
        last = stream.until_end()[-1]
        assert last["info"] == {"debug": "Consumption is blocked"}
        assert "events" not in last
        assert low_level.status_code == 200
        for _ in low_level.iter_lines():
            pass
        assert time.monotonic() - started < 10
