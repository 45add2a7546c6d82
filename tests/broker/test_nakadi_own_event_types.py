"""Nakadi's own event types on a broker started with them (the CLI's default): created at start,
receiving what the broker did, read by an ordinary subscription, JSON or Avro; and the
dead-letter queue filled by a consumer that never commits one poison event."""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from changebroker.broker import main
from changebroker.broker.avro import envelope
from changebroker.broker.avro.payloads import compile_schema
from changebroker.broker.own_events import definitions
from changebroker.broker.settings import Settings
from changebroker.broker.streams.cursors import format_offset
from changebroker.broker.subscriptions.dead_letters import (
    MAX_EVENT_SEND_COUNT,
    QUEUE_EVENT_TYPE,
    UNPROCESSABLE_EVENT_POLICY,
)
from changebroker.stack.processes import wait_until
from tests.broker.stream_support import order, publish
from tests.broker.subscription_support import Stream, commit, create, reopened
from tests.broker.test_timelines import switch
from tests.support.brokers import broker_client
from tests.support.event_types import business_event_type

KPI = [
    definitions.EVENT_TYPE_LOG,
    definitions.SUBSCRIPTION_LOG,
    definitions.DATA_STREAMED,
    definitions.BATCH_PUBLISHED,
    definitions.ACCESS_LOG,
]


@pytest.fixture
def own(pg_dsn: str, kafka_bootstrap: str) -> Iterator[httpx.Client]:
    """A broker on a database of its own, with Nakadi's own event types."""
    settings = Settings(
        pg_dsn=pg_dsn, kafka_bootstrap=kafka_bootstrap, max_partitions=12, nakadi_event_types=True
    )
    with broker_client(settings) as client:
        yield client


def _events(
    client: httpx.Client, subscription_id: str, until: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """The subscription's events from its beginning, read (and committed) until ``until`` says
    they are enough; the broker's own events come within a second or so."""
    got: list[dict[str, Any]] = []
    stream = Stream(client, subscription_id, batch_flush_timeout=0.2, batch_limit=100)
    try:

        def enough() -> bool:
            batch = stream.batch()
            assert batch is not None
            if batch.get("events"):
                got.extend(batch["events"])
                commit(client, subscription_id, stream.id, [batch["cursor"]])
            return until(got)

        wait_until(enough, timeout=30, what="the broker's own events")
    finally:
        stream.close()
    return got


def _reader(client: httpx.Client, event_type: str) -> str:
    return str(
        create(client, [event_type], read_from="begin", consumer_group=uuid.uuid4().hex)["id"]
    )


def test_they_are_created_at_start_as_nakadi_defines_them(own: httpx.Client) -> None:
    for name in KPI:
        body = own.get(f"/event-types/{name}").json()
        assert (body["category"], body["schema"]["type"]) == ("business", "avro_schema"), name
        assert json.loads(body["schema"]["schema"]) == definitions.KPI_SCHEMAS[name]
        assert body["owning_application"] == "stups_nakadi"
    audit = own.get(f"/event-types/{definitions.AUDIT_LOG}").json()
    assert (audit["category"], audit["partition_strategy"], audit["partition_key_fields"]) == (
        "data",
        "hash",
        ["resource_id"],
    )
    queue = own.get(f"/event-types/{QUEUE_EVENT_TYPE}").json()
    assert queue["options"]["retention_time"] == 86_400_000
    partitions = own.get(f"/event-types/{definitions.BATCH_PUBLISHED}/partitions").json()
    assert len(partitions) == 10  # Nakadi's read parallelism for it


def test_what_the_broker_did_arrives_as_events(
    own: httpx.Client, unique_name: Callable[[str], str]
) -> None:
    readers = {name: _reader(own, name) for name in [*KPI, definitions.AUDIT_LOG]}
    name = unique_name("watched")
    assert own.post("/event-types", json=business_event_type(name)).status_code == 201
    publish(own, name, [order("1"), order("2")])
    subscription = _reader(own, name)
    stream = Stream(own, subscription, batch_flush_timeout=0.1, stream_timeout=1)
    try:
        stream.until_end()
    finally:
        stream.close()

    (created,) = [
        e
        for e in _events(own, readers[definitions.EVENT_TYPE_LOG], bool)
        if e["event_type"] == name
    ]
    assert {k: created[k] for k in ("status", "category", "authz", "compatibility_mode")} == {
        "status": "created",
        "category": "BUSINESS",
        "authz": "disabled",
        "compatibility_mode": "FORWARD",
    }
    assert created["metadata"]["event_type"] == definitions.EVENT_TYPE_LOG
    assert created["metadata"]["version"] == "1.0.0"

    logged = _events(
        own,
        readers[definitions.SUBSCRIPTION_LOG],
        lambda got: any(e["subscription_id"] == subscription for e in got),
    )
    assert [e["status"] for e in logged if e["subscription_id"] == subscription] == ["created"]

    published = _events(
        own,
        readers[definitions.BATCH_PUBLISHED],
        lambda got: any(e["event_type"] == name for e in got),
    )
    (batch,) = [e for e in published if e["event_type"] == name]
    assert batch["number_of_events"] == 2 and batch["batch_size"] > 0
    assert batch["app"] == "anonymous" and len(batch["app_hashed"]) == 64

    streamed = _events(
        own,
        readers[definitions.DATA_STREAMED],
        lambda got: any(e["event_type"] == name for e in got),
    )
    (told,) = [e for e in streamed if e["event_type"] == name]
    assert (told["api"], told["subscription"], told["number_of_events"]) == (
        "hila",
        subscription,
        2,
    )
    assert told["batches_streamed"] >= 1 and told["bytes_streamed"] > 0

    accessed = _events(
        own,
        readers[definitions.ACCESS_LOG],
        lambda got: any(e["path"] == f"/event-types/{name}/events" for e in got),
    )
    (access,) = [e for e in accessed if e["path"] == f"/event-types/{name}/events"]
    assert (access["method"], access["status_code"], access["query"]) == ("POST", 200, "")
    assert access["request_length"] > 0 and access["content_encoding"] == "-"

    audited = _events(
        own,
        readers[definitions.AUDIT_LOG],
        lambda got: any(e["data"]["resource_id"] == name for e in got),
    )
    (change,) = [e for e in audited if e["data"]["resource_id"] == name]
    assert (change["data_type"], change["data_op"]) == ("event_type", "C")
    assert change["data"]["user"] == "anonymous" and len(change["data"]["user_hash"]) == 64


def test_kpi_events_are_avro_to_an_avro_reader(own: httpx.Client) -> None:
    json_reader = _reader(own, definitions.SUBSCRIPTION_LOG)
    avro_reader = _reader(own, definitions.SUBSCRIPTION_LOG)
    subscription = _reader(own, definitions.ACCESS_LOG)
    _events(own, json_reader, lambda got: any(e["subscription_id"] == subscription for e in got))
    with own.stream(
        "GET",
        f"/subscriptions/{avro_reader}/events",
        params={"stream_timeout": 1, "batch_flush_timeout": 1, "batch_limit": 10},
        headers={"Accept": "application/avro-binary", "Accept-Encoding": "identity"},
    ) as response:
        batches = envelope.read_consumption_batches(response.read())
    sent = [e for b in batches for e in b["events"]]
    kpi = definitions.KPI_SCHEMAS[definitions.SUBSCRIPTION_LOG]
    schema = compile_schema(json.dumps(kpi), "1.0.0")
    payloads = [schema.decode(e["payload"]) for e in sent]
    assert {"subscription_id": subscription, "status": "created"} in payloads
    assert all(e["metadata"]["event_type"] == definitions.SUBSCRIPTION_LOG for e in sent)


def test_a_poison_event_never_committed_ends_in_the_dead_letter_queue(
    own: httpx.Client, make_event_type_on: Callable[..., str]
) -> None:
    name = make_event_type_on(own)
    publish(own, name, [order(f"order-{i}") for i in range(12)])
    letter, subscription = _poisoned(own, name, "order-5")
    assert letter["event_type"] == name and letter["partition"] == "0"
    assert letter["offset"] == format_offset(5)
    # The poison event was committed for the consumer: its offset is behind the cursor.
    cursor = own.get(f"/subscriptions/{subscription}/cursors").json()["items"][0]["offset"]
    assert cursor >= letter["offset"]


def test_a_poison_event_in_a_later_timeline_is_named_by_its_timeline(
    own: httpx.Client, make_event_type_on: Callable[..., str]
) -> None:
    """The subscription's cursor runs through the event type's timelines: the event skipped is
    the one in the new topic, and its offset there is what the dead letter and the commit
    name."""
    name = make_event_type_on(own)
    publish(own, name, [order(f"order-{i}") for i in range(3)])
    switch(own, name)
    publish(own, name, [order(f"order-{i}") for i in range(3, 12)])
    letter, subscription = _poisoned(own, name, "order-5")
    assert letter["offset"] == format_offset(2, timeline=2)
    cursor = own.get(f"/subscriptions/{subscription}/cursors").json()["items"][0]["offset"]
    assert cursor.startswith("001-0002-") and cursor >= letter["offset"]


def _poisoned(client: httpx.Client, name: str, poison: str) -> tuple[dict[str, Any], str]:
    """A consumer of ``name``'s orders that commits every batch but dies on the one holding
    ``poison``, again and again, until the broker moves the event aside: the dead letter it
    published and the subscription's id."""
    queue = _reader(client, QUEUE_EVENT_TYPE)
    annotations = {MAX_EVENT_SEND_COUNT: "2", UNPROCESSABLE_EVENT_POLICY: "DEAD_LETTER_QUEUE"}
    subscription = str(create(client, [name], read_from="begin", annotations=annotations)["id"])
    after = int(poison.split("-")[1])
    for _ in range(12):
        stream = reopened(client, subscription, batch_limit=3, commit_timeout=1, stream_timeout=3)
        passed = False
        try:
            while (batch := stream.batch()) is not None:
                numbers = [e["order_number"] for e in batch.get("events", [])]
                if poison in numbers:
                    break  # the consumer dies of it, as Nakadi's test consumer does
                if numbers:
                    answer = commit(client, subscription, stream.id, [batch["cursor"]])
                    assert answer.status_code == 204
                passed |= any(int(n.split("-")[1]) > after for n in numbers)
        finally:
            stream.close()
        if passed:
            break
    assert passed, "the stream never got past the poison event"
    (letter,) = _events(client, queue, bool)
    assert letter["subscription_id"] == subscription
    assert letter["event"]["order_number"] == poison
    assert letter["error"]["message"] == "Nakadi Auto DLQ: skipped due to failed commits count: 2"
    return letter, subscription


@pytest.fixture
def make_event_type_on(unique_name: Callable[[str], str]) -> Callable[[httpx.Client], str]:
    def make(client: httpx.Client) -> str:
        name = unique_name("poisoned")
        assert client.post("/event-types", json=business_event_type(name)).status_code == 201
        return name

    return make


def test_they_are_on_unless_the_flag_or_its_variable_says_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def settings(*flags: str) -> Settings:
        parser = argparse.ArgumentParser()
        main.configure(parser)
        return main.settings_of(parser.parse_args(["--pg-url", "postgresql://x", *flags]))

    assert settings().nakadi_event_types
    assert settings().kpi_salt == "salt"
    assert not settings("--no-nakadi-event-types").nakadi_event_types
    assert settings("--kpi-salt", "pepper").kpi_salt == "pepper"
    monkeypatch.setenv("CHANGEBROKER_BROKER_NO_NAKADI_EVENT_TYPES", "true")
    assert not settings().nakadi_event_types
