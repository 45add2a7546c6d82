"""Per-resource authorization on open streams: a reader who loses access gets no further batch."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from changebroker.auth import AuthSettings
from changebroker.broker.app import create_app
from changebroker.broker.settings import Settings
from changebroker.stack.processes import wait_until
from changebroker.stack.run import serve_in_thread
from tests.broker.subscription_support import Stream, commit
from tests.support.credentials import tokens_file
from tests.support.event_types import business_event_type, order_events

SCOPES = ["nakadi.event_type.write", "nakadi.event_stream.write", "nakadi.event_stream.read"]
FLUSH_SECONDS = 1


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def service(name: str) -> dict[str, str]:
    return {"data_type": "service", "value": name}


@pytest.fixture(scope="module")
def broker(
    broker_dsn: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[httpx.Client]:
    path = tokens_file(
        tmp_path_factory.mktemp("auth") / "tokens.json",
        {"ops": ("ops", SCOPES), "shop": ("shop", SCOPES), "bi": ("bi", SCOPES)},
    )
    auth = AuthSettings(mode="tokens", tokens_file=path, admins=("ops",))
    settings = Settings(pg_dsn=broker_dsn, kafka_bootstrap=kafka_bootstrap, auth=auth)
    with (
        serve_in_thread(create_app(settings)) as url,
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        yield http


def shops_subscription(
    broker: httpx.Client, name: str, readers: list[dict[str, str]], **fields: str
) -> tuple[dict[str, Any], str]:
    """Event type ``name`` and a subscription to it, both shop's, read by ``readers``: the
    subscription's body and its id."""
    assert broker.post("/event-types", json=business_event_type(name), headers=bearer("shop"))
    subscription = {
        "owning_application": "shop",
        "event_types": [name],
        "consumer_group": name,
        "authorization": {"admins": [service("shop")], "readers": readers},
        **fields,
    }
    created = broker.post("/subscriptions", json=subscription, headers=bearer("shop"))
    assert created.status_code == 201, created.text
    return subscription, str(created.json()["id"])


class OpenStream:
    """A low-level stream read in a thread: when its lines came and when it ended."""

    def __init__(self, client: httpx.Client, path: str, token: str) -> None:
        self.lines: list[float] = []
        self.ended: float | None = None
        self.status = 0
        self.closing = False
        # A client of its own: the test closes it while the stream may still run.
        self._client = httpx.Client(base_url=client.base_url, timeout=60)
        params = {"batch_flush_timeout": FLUSH_SECONDS, "stream_timeout": 60}
        self._thread = threading.Thread(target=self._read, args=(path, params, token), daemon=True)
        self._thread.start()
        wait_until(lambda: len(self.lines) >= 1, timeout=30, what="the stream's first batch")

    def _read(self, path: str, params: dict, token: str) -> None:
        try:
            with self._client.stream("GET", path, params=params, headers=bearer(token)) as answer:
                self.status = answer.status_code
                for _ in answer.iter_lines():
                    self.lines.append(time.monotonic())
        except httpx.HTTPError:
            if not self.closing:
                raise
        self.ended = time.monotonic()

    def close(self) -> None:
        self.closing = True
        self._client.close()
        self._thread.join(timeout=30)


def test_narrowing_readers_ends_the_streams_of_those_who_lost_access(
    broker: httpx.Client, unique_name
) -> None:
    name = unique_name("narrowed")
    both = {"admins": [service("shop")], "readers": [service("shop"), service("bi")]}
    body = business_event_type(name, authorization={**both, "writers": [service("shop")]})
    assert broker.post("/event-types", json=body, headers=bearer("shop")).status_code == 201
    path = f"/event-types/{name}/events"
    kept, lost = OpenStream(broker, path, "shop"), OpenStream(broker, path, "bi")
    assert kept.status == lost.status == 200

    narrowed = {**body["authorization"], "readers": [service("shop")]}
    update = broker.put(
        f"/event-types/{name}", json={**body, "authorization": narrowed}, headers=bearer("shop")
    )
    assert update.status_code == 200, update.text
    changed = time.monotonic()
    wait_until(lambda: lost.ended is not None, timeout=10, what="the lost reader's stream to end")
    assert lost.ended is not None and lost.ended - changed <= FLUSH_SECONDS + 1.0
    # The reader who kept access still gets its batches (keep-alives) after the change.
    wait_until(
        lambda: any(t > changed + FLUSH_SECONDS for t in kept.lines),
        timeout=10,
        what="a batch after the change",
    )
    assert kept.ended is None
    kept.close()
    # And cannot come back.
    assert broker.get(path, headers=bearer("bi")).status_code == 403


def test_blocking_a_consumer_ends_its_open_stream(broker: httpx.Client, unique_name) -> None:
    name = unique_name("blocked")
    assert broker.post("/event-types", json=business_event_type(name), headers=bearer("shop"))
    stream = OpenStream(broker, f"/event-types/{name}/events", "bi")
    block = broker.put("/settings/blacklist/CONSUMER_APP/bi", headers=bearer("ops"))
    assert block.status_code == 204
    try:
        blocked = time.monotonic()
        wait_until(lambda: stream.ended is not None, timeout=10, what="the blocked stream to end")
        # Another process would see the block within its settings refresh; this one at once.
        assert stream.ended is not None and stream.ended - blocked <= FLUSH_SECONDS + 1.0
        refused = broker.get(f"/event-types/{name}/events", headers=bearer("bi"))
        assert refused.status_code == 403
    finally:
        broker.delete("/settings/blacklist/CONSUMER_APP/bi", headers=bearer("ops"))


def test_narrowing_a_subscriptions_readers_ends_the_lost_readers_stream(
    broker: httpx.Client, unique_name
) -> None:
    name = unique_name("subscribed")
    readers = [service("shop"), service("bi")]
    subscription, sid = shops_subscription(broker, name, readers)
    stream = OpenStream(broker, f"/subscriptions/{sid}/events", "bi")
    assert stream.status == 200
    # Only its admins change it, and its authorization cannot be dropped.
    narrowed = {
        **subscription,
        "authorization": {"admins": [service("shop")], "readers": readers[:1]},
    }
    assert (
        broker.put(f"/subscriptions/{sid}", json=narrowed, headers=bearer("bi")).status_code == 403
    )
    dropped = {**subscription, "authorization": None}
    assert (
        broker.put(f"/subscriptions/{sid}", json=dropped, headers=bearer("shop")).status_code == 422
    )
    assert stream.ended is None
    assert (
        broker.put(f"/subscriptions/{sid}", json=narrowed, headers=bearer("shop")).status_code
        == 204
    )
    changed = time.monotonic()
    wait_until(lambda: stream.ended is not None, timeout=10, what="the lost reader's stream to end")
    assert stream.ended is not None and stream.ended - changed <= FLUSH_SECONDS + 1.0
    assert broker.get(f"/subscriptions/{sid}/events", headers=bearer("bi")).status_code == 403


def test_listings_filter_by_the_writer_or_reader_they_name(
    broker: httpx.Client, unique_name
) -> None:
    """Nakadi lists every event type and subscription to any caller with the scope; a team
    finds its own with ``writer=`` / ``reader=`` (named or by a wildcard)."""
    everyone = {"data_type": "*", "value": "*"}
    owners = {"shop": [service("shop")], "bi": [service("bi")], "any": [everyone]}
    names = {team: unique_name(f"listed_{team}") for team in [*owners, "open"]}
    for team, name in names.items():
        lists = owners.get(team)
        section = None if lists is None else {"admins": lists, "readers": lists, "writers": lists}
        body = business_event_type(name, **({"authorization": section} if section else {}))
        assert broker.post("/event-types", json=body, headers=bearer("ops")).status_code == 201
        subscription = {
            "owning_application": "listing",
            "event_types": [name],
            "consumer_group": name,
            **({"authorization": {"admins": lists, "readers": lists}} if lists else {}),
        }
        created = broker.post("/subscriptions", json=subscription, headers=bearer("ops"))
        assert created.status_code == 201, created.text

    def event_types(token: str, **params: str) -> set[str]:
        answer = broker.get("/event-types", params=params, headers=bearer(token))
        assert answer.status_code == 200, answer.text
        return {e["name"] for e in answer.json()} & set(names.values())

    def subscribed(token: str, **params: str) -> set[str]:
        params = {"owning_application": "listing", "limit": "1000", **params}
        answer = broker.get("/subscriptions", params=params, headers=bearer(token))
        assert answer.status_code == 200, answer.text
        return {s["event_types"][0] for s in answer.json()["items"]} & set(names.values())

    for team, other in (("shop", "bi"), ("bi", "shop")):
        own = {names[team], names["any"]}
        assert event_types(team, writer=f"service:{team}") == own
        assert subscribed(team, reader=f"service:{team}") == own
        assert names[other] not in event_types(team, writer=f"service:{team}")
    # Unfiltered, every caller sees every one: what a resource's metadata says is not secret.
    assert event_types("bi") == event_types("ops") == set(names.values())
    assert subscribed("bi") == subscribed("ops") == set(names.values())
    assert event_types("ops", owning_application="nobody") == set()
    refused = broker.get("/event-types", params={"writer": "shop"}, headers=bearer("shop"))
    assert refused.status_code == 400
    assert refused.headers["content-type"] == "application/problem+json"


def test_a_commit_is_decided_on_the_subscription_as_it_is_when_committed(
    broker: httpx.Client, unique_name
) -> None:
    """A broker process remembers the subscriptions it read for the commits that follow: a
    reader removed since then cannot commit, and a deleted subscription is not found."""
    name = unique_name("committed")
    readers = [service("shop"), service("bi")]
    subscription, sid = shops_subscription(broker, name, readers, read_from="begin")
    published = broker.post(
        f"/event-types/{name}/events", json=order_events(2), headers=bearer("shop")
    )
    assert published.status_code == 200, published.text
    with httpx.Client(base_url=broker.base_url, headers=bearer("bi"), timeout=60) as bi:
        stream = Stream(bi, sid, batch_limit=1, batch_flush_timeout=FLUSH_SECONDS)
        first, second = (batch["cursor"] for batch in stream.read_events(2))
        assert commit(bi, sid, stream.id, [first]).status_code == 204
        narrowed = {**subscription["authorization"], "readers": readers[:1]}
        changed = broker.put(
            f"/subscriptions/{sid}",
            json={**subscription, "authorization": narrowed},
            headers=bearer("shop"),
        )
        assert changed.status_code == 204, changed.text
        refused = commit(bi, sid, stream.id, [second])
        assert refused.status_code == 403, refused.text
        stream.close()
    cursors = broker.get(f"/subscriptions/{sid}/cursors", headers=bearer("shop")).json()["items"]
    held = {(c["event_type"], c["partition"]): c["offset"] for c in cursors}
    assert held[(name, first["partition"])] == first["offset"]
    assert held[(name, second["partition"])] != second["offset"]
    # Remembered as narrowed by the refused commit's second read; then deleted elsewhere.
    shop = {**bearer("shop"), "X-Nakadi-StreamId": stream.id}
    assert broker.delete(f"/subscriptions/{sid}", headers=bearer("shop")).status_code == 204
    gone = broker.post(f"/subscriptions/{sid}/cursors", json={"items": [second]}, headers=shop)
    assert gone.status_code == 404, gone.text
    assert gone.json()["detail"] == f'Subscription with id "{sid}" does not exist'
