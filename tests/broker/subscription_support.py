"""Subscriptions through the API: create one, read its stream line by line, commit what came."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from changebroker.stack.processes import wait_until
from tests.broker.stream_support import ANY_TIMELINE_OFFSET, order, publish
from tests.broker.swagger import validate


def create(client: httpx.Client, event_types: list[str], **fields: Any) -> dict[str, Any]:
    body = {"owning_application": "order-service", "event_types": event_types, **fields}
    response = client.post("/subscriptions", json=body)
    assert response.status_code == 201, response.text
    validate("Subscription", response.json())
    return dict(response.json())


class Stream:
    """An open ``/subscriptions/{id}/events`` response, read one batch at a time.

    Give it a small ``batch_flush_timeout``: keep-alives then arrive often, so a
    read never blocks for long, and ``close()`` is how a consumer dies.
    """

    def __init__(
        self,
        client: httpx.Client,
        subscription_id: str,
        body: dict[str, Any] | None = None,
        **params: Any,
    ) -> None:
        """GET with ``params``; POST when the parameters come as a ``body``."""
        self._context = client.stream(
            "GET" if body is None else "POST",
            f"/subscriptions/{subscription_id}/events",
            params=params,
            json=body,
        )
        self.response = self._context.__enter__()
        self.status_code = self.response.status_code
        self.ended = False
        if self.status_code != 200:
            self.response.read()
            self._context.__exit__(None, None, None)
            return
        self.id = self.response.headers["X-Nakadi-StreamId"]
        self._lines: Iterator[str] = self.response.iter_lines()

    def batch(self) -> dict[str, Any] | None:
        """The next batch, checked against the spec; None once the server ended the stream."""
        assert self.status_code == 200, self.response.text
        for line in self._lines:
            if line:
                batch = json.loads(line)
                validate("SubscriptionEventStreamBatch", batch)
                assert re.match(ANY_TIMELINE_OFFSET, batch["cursor"]["offset"]), batch
                return dict(batch)
        self.ended = True
        return None

    def read_events(self, count: int) -> list[dict[str, Any]]:
        """Batches until ``count`` events came (keep-alives skipped); fails if the stream ends."""
        got: list[dict[str, Any]] = []
        seen = 0
        while seen < count:
            batch = self.batch()
            assert batch is not None, f"the stream ended after {seen} of {count} events"
            if batch.get("events"):
                got.append(batch)
                seen += len(batch["events"])
        return got

    def until_end(self) -> list[dict[str, Any]]:
        """Every batch until the server ends the stream."""
        got = []
        while (batch := self.batch()) is not None:
            got.append(batch)
        return got

    def close(self) -> None:
        if self.status_code == 200:
            self._context.__exit__(None, None, None)


def reopened(client: httpx.Client, subscription_id: str, **params: Any) -> Stream:
    """A new stream, once the one a consumer just closed has ended on the server (a stream
    opened before gets 409: no free slot)."""
    opened: list[Stream] = []

    def opens() -> bool:
        stream = Stream(client, subscription_id, **params)
        if stream.status_code == 409:
            return False
        opened.append(stream)
        return True

    wait_until(opens, timeout=30, what="the last stream to end on the server")
    return opened[0]


def published(
    client: httpx.Client, make_event_type: Callable[..., str], events: int
) -> tuple[str, str]:
    """A new event type, a subscription reading it from the beginning, then ``events``
    orders published (numbered from 0): the event type's name and the subscription's id."""
    name = make_event_type()
    subscription_id = create(client, [name], read_from="begin")["id"]
    publish(client, name, [order(str(i)) for i in range(events)])
    return name, str(subscription_id)


def commit(
    client: httpx.Client, subscription_id: str, stream_id: str, cursors: list[dict[str, Any]]
) -> httpx.Response:
    return client.post(
        f"/subscriptions/{subscription_id}/cursors",
        json={"items": cursors},
        headers={"X-Nakadi-StreamId": stream_id},
    )


def next_committed(stream: Stream, client: httpx.Client, subscription_id: str) -> list[str]:
    """The order numbers of the stream's next batch of events, committed through ``client``,
    as a consumer committing every batch does."""
    (batch,) = stream.read_events(1)
    answer = commit(client, subscription_id, stream.id, [batch["cursor"]])
    assert answer.status_code == 204, answer.text
    return numbers([batch])


def stats(client: httpx.Client, subscription_id: str, **params: Any) -> list[dict[str, Any]]:
    response = client.get(f"/subscriptions/{subscription_id}/stats", params=params)
    assert response.status_code == 200, response.text
    for item in response.json()["items"]:
        validate("SubscriptionEventTypeStats", item)
    return list(response.json()["items"])


def owners(client: httpx.Client, subscription_id: str) -> dict[tuple[str, str], str | None]:
    """(event type, partition) -> the stream reading it, as stats say (None: unassigned)."""
    return {
        (item["event_type"], p["partition"]): p.get("stream_id")
        if p["state"] == "assigned"
        else None
        for item in stats(client, subscription_id)
        for p in item["partitions"]
    }


def wait_until_gone(client: httpx.Client, subscription_id: str, stream_id: str) -> None:
    """Until the server noticed the stream's client went away and no partition counts it."""
    wait_until(
        lambda: stream_id not in owners(client, subscription_id).values(),
        timeout=30,
        what=f"stream {stream_id} to end",
    )


def numbers(batches: list[dict[str, Any]]) -> list[str]:
    return [e["order_number"] for b in batches for e in b.get("events", [])]
