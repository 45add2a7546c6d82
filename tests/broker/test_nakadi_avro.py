"""Avro binary publishing and consuming against the real broker and Kafka, as Nakadi's own
end-to-end test does it (an event type moved to Avro, Avro published, read as JSON and as Avro),
and every other pairing of JSON and Avro producers and consumers of one event type, also across
a timeline switch made while they read; then ``deleted-events`` on compacted event types."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from changebroker.broker.authorization import Scopes
from changebroker.broker.avro import envelope
from changebroker.broker.avro.envelope import Record
from changebroker.broker.avro.payloads import compile_schema
from changebroker.stack.processes import wait_until
from tests.broker.stream_support import stream_lines
from tests.broker.subscription_support import Stream, commit, create, owners
from tests.broker.swagger import assert_problem
from tests.broker.test_timelines import switch
from tests.support.event_types import business_event_type

FOO_JSON = '{"type": "object", "properties": {"foo": {"type": "string"}}}'
FOO_AVRO = (
    '{"name": "TestEnd2End", "type": "record", "fields": [{"name": "foo", "type": "string"}]}'
)
AVRO = {"Content-Type": "application/avro-binary"}
EID = "CE8C9EBC-3F19-4B9D-A453-08AD2EDA6028"


def _payload(foo: str) -> bytes:
    return compile_schema(FOO_AVRO).encode({"foo": foo})


def _record(name: str, version: str, payload: bytes, **metadata: Any) -> Record:
    fields = {
        "event_type": name,
        "version": version,
        "occurred_at": 1_700_000_000_000,
        "eid": EID,
        **metadata,
    }
    return Record({k: fields.get(k) for k in envelope_fields()}, payload)


def avro_batch(name: str, version: str, foo: str) -> bytes:
    """A publishing batch of one Avro event ``{"foo": foo}`` of schema ``version``."""
    return envelope.publishing_batch([_record(name, version, _payload(foo))])


def envelope_fields() -> list[str]:
    schema = envelope.SCHEMAS["envelope"]["1"]
    return [f["name"] for f in schema["fields"][0]["type"]["fields"]]


def _post_avro(
    client: httpx.Client, name: str, *records: Record, path: str = "events"
) -> httpx.Response:
    return client.post(
        f"/event-types/{name}/{path}", content=envelope.publishing_batch(records), headers=AVRO
    )


def _binary_batches(
    client: httpx.Client, subscription_id: str, **params: Any
) -> tuple[str, list[dict[str, Any]]]:
    """Every ConsumptionBatch of an Avro subscription stream that ends by its own limits."""
    with client.stream(
        "GET",
        f"/subscriptions/{subscription_id}/events",
        params=params,
        headers={"Accept": "application/avro-binary", "Accept-Encoding": "identity"},
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"] == "application/avro-binary"
        body = response.read()
        return response.headers["X-Nakadi-StreamId"], envelope.read_consumption_batches(body)


@pytest.fixture
def moved_to_avro(client: httpx.Client, make_event_type: Callable[..., str]) -> str:
    """A business type of ``{"foo": string}`` (1.0.0) whose schema moved to Avro (2.0.0)."""
    name = make_event_type(
        partition_strategy="random",
        partition_key_fields=None,
        schema={"type": "json_schema", "schema": FOO_JSON},
    )
    moved = client.post(
        f"/event-types/{name}/schemas", json={"type": "avro_schema", "schema": FOO_AVRO}
    )
    assert moved.status_code == 200, moved.text
    return name


def test_avro_published_is_read_as_json_and_as_avro(
    client: httpx.Client, moved_to_avro: str
) -> None:
    name = moved_to_avro
    assert _post_avro(client, name, _record(name, "2.0.0", _payload("bar"))).status_code == 200
    unknown = _post_avro(client, name, _record(name, "5.0.0", _payload("bar")))
    assert unknown.status_code == 207, unknown.text
    assert unknown.json() == [
        {
            "eid": EID,
            "publishing_status": "failed",
            "step": "publishing",
            "detail": f'EventType "{name}" has no avro_schema with version "5.0.0"',
        }
    ]

    json_reader = create(client, [name], read_from="begin")["id"]
    stream = Stream(client, json_reader, batch_flush_timeout=0.1)
    try:
        (batch,) = stream.read_events(1)
    finally:
        stream.close()
    (event,) = batch["events"]
    assert event["foo"] == "bar"
    assert event["metadata"]["eid"] == EID  # as sent, upper case
    assert event["metadata"]["version"] == "2.0.0"
    assert event["metadata"]["event_type"] == name
    assert event["metadata"]["occurred_at"] == "2023-11-14T22:13:20.000Z"
    assert event["metadata"]["partition"] == "0"

    avro_reader = create(client, [name], read_from="begin", consumer_group="avro")["id"]
    stream_id, batches = _binary_batches(
        client, avro_reader, stream_timeout=1, batch_flush_timeout=1
    )
    with_events = [b for b in batches if b["events"]]
    (first,) = with_events
    assert first["info"] == "Stream started"
    (sent,) = first["events"]
    assert sent["metadata"]["eid"] == EID
    assert compile_schema(FOO_AVRO).decode(sent["payload"]) == {"foo": "bar"}
    # The Avro cursor commits like any other.
    cursor = dict(first["cursor"])
    assert commit(client, avro_reader, stream_id, [cursor]).status_code == 204
    assert batches[-1]["info"] == "Stream timeout reached"


def test_json_and_avro_producers_and_consumers_interoperate(
    client: httpx.Client, moved_to_avro: str
) -> None:
    name = moved_to_avro
    # JSON events are still validated against the newest json_schema (1.0.0), as in Nakadi.
    json_event: dict[str, Any] = {
        "foo": "from-json",
        "metadata": {"eid": str(uuid.uuid4()), "occurred_at": "2026-01-02T03:04:05.678Z"},
    }
    assert client.post(f"/event-types/{name}/events", json=[json_event]).status_code == 200
    refused = client.post(
        f"/event-types/{name}/events",
        json=[
            {
                "foo": 1,
                "metadata": {"eid": str(uuid.uuid4()), "occurred_at": "2026-01-02T03:04:05Z"},
            }
        ],
    )
    assert refused.status_code == 422, refused.text
    assert (
        _post_avro(client, name, _record(name, "2.0.0", _payload("from-avro"))).status_code == 200
    )

    # Low-level JSON reader: both, in order, the Avro one with its payload and metadata.
    _, lines = stream_lines(
        client, name, [{"partition": "0", "offset": "BEGIN"}], stream_limit=2, batch_limit=2
    )
    events = [e for line in lines for e in json.loads(line).get("events", [])]
    assert [e["foo"] for e in events] == ["from-json", "from-avro"]
    assert events[0]["metadata"]["version"] == "1.0.0"
    assert events[1]["metadata"]["version"] == "2.0.0"

    # Avro reader: both as envelopes; the JSON one written with the newest avro_schema.
    reader = create(client, [name], read_from="begin")["id"]
    _, batches = _binary_batches(
        client, reader, batch_limit=2, stream_timeout=1, batch_flush_timeout=1
    )
    sent = [e for b in batches for e in b["events"]]
    assert [compile_schema(FOO_AVRO).decode(e["payload"])["foo"] for e in sent] == [
        "from-json",
        "from-avro",
    ]
    assert sent[0]["metadata"]["version"] == "2.0.0"
    assert sent[0]["metadata"]["eid"] == json_event["metadata"]["eid"]
    assert sent[0]["metadata"]["occurred_at"] == 1_767_323_045_678


def test_avro_events_are_read_across_a_timeline_switch_made_while_streams_run(
    client: httpx.Client, moved_to_avro: str
) -> None:
    """A switch adds a topic while a low-level stream, a JSON subscription stream and an Avro
    one run: each goes on into it and reads its Avro events as it read the old topic's."""
    name = moved_to_avro
    assert _post_avro(client, name, _record(name, "2.0.0", _payload("before"))).status_code == 200
    json_reader = create(client, [name], read_from="begin")["id"]
    avro_reader = create(client, [name], read_from="begin", consumer_group="avro")["id"]
    avro_read: list[list[dict[str, Any]]] = []
    avro_stream = threading.Thread(
        target=lambda: avro_read.append(
            _binary_batches(client, avro_reader, stream_timeout=6, batch_flush_timeout=1)[1]
        ),
        daemon=True,
    )
    subscription = Stream(client, json_reader, batch_flush_timeout=0.1)
    cursors = json.dumps([{"partition": "0", "offset": "BEGIN"}])
    params = {"batch_limit": 1, "stream_limit": 2, "batch_flush_timeout": 1, "stream_timeout": 30}
    with client.stream(
        "GET", f"/event-types/{name}/events", params=params, headers={"X-Nakadi-Cursors": cursors}
    ) as low_level:
        try:
            lines = (json.loads(line) for line in low_level.iter_lines() if line)
            low_level_read = [next(b for b in lines if b.get("events"))]
            (before,) = subscription.read_events(1)
            avro_stream.start()
            wait_until(
                lambda: owners(client, avro_reader)[(name, "0")] is not None,
                timeout=30,
                what="the Avro stream to take its partition",
            )
            switch(client, name)
            after = _post_avro(client, name, _record(name, "2.0.0", _payload("after")))
            assert after.status_code == 200, after.text
            low_level_read += [b for b in lines if b.get("events")]
            (moved,) = subscription.read_events(1)
        finally:
            subscription.close()
    avro_stream.join(timeout=30)

    in_timeline_2 = "001-0002-000000000000000000"
    assert [(b["cursor"]["offset"], b["events"][0]["foo"]) for b in low_level_read] == [
        ("001-0001-000000000000000000", "before"),
        (in_timeline_2, "after"),
    ]
    assert (before["events"][0]["foo"], moved["events"][0]["foo"]) == ("before", "after")
    assert moved["cursor"]["offset"] == in_timeline_2
    assert moved["events"][0]["metadata"]["version"] == "2.0.0"
    (avro_batches,) = avro_read
    read = [
        (b["cursor"]["offset"], compile_schema(FOO_AVRO).decode(e["payload"])["foo"])
        for b in avro_batches
        for e in b["events"]
    ]
    assert read == [("001-0001-000000000000000000", "before"), (in_timeline_2, "after")]
    assert avro_batches[-1]["info"] == "Stream timeout reached"


def test_a_json_event_an_avro_reader_cannot_get_ends_its_stream_with_the_reason(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = make_event_type(partition_strategy="random", partition_key_fields=None)
    client.post(
        f"/event-types/{name}/events",
        json=[
            {
                "order_number": "1",
                "metadata": {"eid": str(uuid.uuid4()), "occurred_at": "2026-01-02T03:04:05Z"},
            }
        ],
    )
    reader = create(client, [name], read_from="begin")["id"]
    _, batches = _binary_batches(client, reader, stream_timeout=5)
    assert not any(b["events"] for b in batches)
    assert "has no avro_schema to write it with" in batches[-1]["info"]
    # Nothing was committed: a JSON reader gets the event.
    stream = Stream(client, reader, batch_flush_timeout=0.1)
    try:
        assert stream.read_events(1)[0]["events"][0]["order_number"] == "1"
    finally:
        stream.close()


def test_an_avro_batch_that_is_not_one_is_400_and_a_bad_payload_207(
    client: httpx.Client, moved_to_avro: str
) -> None:
    name = moved_to_avro
    not_avro = client.post(f"/event-types/{name}/events", content=b'[{"foo": "bar"}]', headers=AVRO)
    assert_problem(not_avro, 400, "single-object encoding")
    other_type = _post_avro(client, name, _record("other", "2.0.0", _payload("x")))
    assert other_type.json()[0]["detail"] == "event type does not match"
    bad_payload = _post_avro(
        client, name, _record(name, "2.0.0", _payload("ok")), _record(name, "2.0.0", b"\xff")
    )
    assert bad_payload.status_code == 207, bad_payload.text
    assert [i["publishing_status"] for i in bad_payload.json()] == ["aborted", "failed"]
    assert "is not a record of schema 2.0.0" in bad_payload.json()[1]["detail"]
    json_version = _post_avro(client, name, _record(name, "1.0.0", _payload("x")))
    assert json_version.status_code == 207
    # Nothing of the refused batches was stored.
    _, lines = stream_lines(client, name, [{"partition": "0", "offset": "BEGIN"}], stream_timeout=1)
    assert not any(json.loads(line).get("events") for line in lines)


def _compacted(
    client: httpx.Client, unique_name: Callable[[str], str], policy: str, **schema: Any
) -> str:
    name = unique_name(f"compacted_{policy}")
    body = business_event_type(
        name,
        partition_strategy="hash",
        partition_key_fields=["foo"],
        cleanup_policy=policy,
        schema=schema or {"type": "json_schema", "schema": FOO_JSON},
        default_statistic={
            "messages_per_minute": 1,
            "message_size": 1,
            "read_parallelism": 4,
            "write_parallelism": 4,
        },
    )
    response = client.post("/event-types", json=body)
    assert response.status_code == 201, response.text
    return name


def _keyed(foo: str, key: str) -> dict[str, Any]:
    return {
        "foo": foo,
        "metadata": {
            "eid": str(uuid.uuid4()),
            "occurred_at": "2026-01-02T03:04:05Z",
            "partition_compaction_key": key,
        },
    }


def test_deleted_events_are_tombstones_no_reader_sees(
    client: httpx.Client, unique_name: Callable[[str], str], broker_dsn: str, kafka_bootstrap: str
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    from changebroker import kafka
    from tests.broker.kafka_read import topic_of

    name = _compacted(client, unique_name, "compact")
    events = [_keyed("a", "key-a"), _keyed("b", "key-b")]
    assert client.post(f"/event-types/{name}/events", json=events).status_code == 200
    # The content is not validated: only what keys and places the event.
    deleted = client.post(
        f"/event-types/{name}/deleted-events",
        json=[{"foo": "a", "metadata": {"partition_compaction_key": "key-a"}}],
    )
    assert deleted.status_code == 200, deleted.text
    assert deleted.content == b""

    topic, partitions = topic_of(broker_dsn, name)
    consumer = Consumer(
        kafka.client_config(kafka_bootstrap, **{"group.id": "tests", "enable.auto.commit": False})
    )
    try:
        records: list[tuple[int, bytes | None, bytes | None]] = []
        for p in range(partitions):
            end = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            if not end:
                continue
            consumer.assign([TopicPartition(topic, p, 0)])
            while len([r for r in records if r[0] == p]) < end:
                message = consumer.poll(10)
                assert message is not None and message.error() is None
                records.append((p, message.key(), message.value()))
    finally:
        consumer.close()
    tombstones = [(p, key) for p, key, value in records if value is None]
    (placed,) = [p for p, key, value in records if key == b"key-a" and value is not None]
    assert tombstones == [(placed, b"key-a")]  # beside the event it deletes, for compaction

    cursors = [{"partition": str(p), "offset": "BEGIN"} for p in range(partitions)]
    _, lines = stream_lines(client, name, cursors, stream_limit=2, batch_limit=1)
    seen = [e["foo"] for line in lines for e in json.loads(line).get("events", [])]
    assert sorted(seen) == ["a", "b"]  # and no tombstone
    reader = create(client, [name], read_from="begin")["id"]
    stream = Stream(client, reader, batch_flush_timeout=0.1, stream_timeout=2)
    try:
        got = stream.until_end()
    finally:
        stream.close()
    assert sorted(e["foo"] for b in got for e in b.get("events", [])) == ["a", "b"]


def test_deleting_needs_a_compacted_type_and_a_key(
    client: httpx.Client, unique_name: Callable[[str], str]
) -> None:
    kept = _compacted(client, unique_name, "delete")
    refused = client.post(f"/event-types/{kept}/deleted-events", json=[_keyed("a", "k")])
    assert refused.status_code == 422, refused.text
    assert refused.json()[0]["publishing_status"] == "aborted"
    assert (
        refused.json()[0]["detail"]
        == "It is not allowed to delete events from non compacted event type"
    )
    compacted = _compacted(client, unique_name, "compact")
    keyless = client.post(
        f"/event-types/{compacted}/deleted-events", json=[{"foo": "a", "metadata": {}}]
    )
    assert keyless.status_code == 422
    assert "partition_compaction_key is required" in keyless.json()[0]["detail"]
    unplaceable = client.post(
        f"/event-types/{compacted}/deleted-events",
        json=[{"metadata": {"partition_compaction_key": "k"}}],
    )
    assert unplaceable.json()[0]["step"] == "partitioning"


def test_avro_deletes_as_nakadi_answers_them(
    client: httpx.Client, unique_name: Callable[[str], str]
) -> None:
    avro = {"type": "avro_schema", "schema": FOO_AVRO}
    kept = _compacted(client, unique_name, "delete", **avro)
    keyed = {"partition_compaction_key": "k", "partition_keys": ["k"]}
    empty = _record(kept, "1.0.0", b"", **keyed)
    assert_problem(
        _post_avro(client, kept, empty, path="deleted-events"),
        422,
        "It is not allowed to delete events from non compacted event type",
    )
    compacted = _compacted(client, unique_name, "compact", **avro)
    with_payload = _post_avro(
        client,
        compacted,
        _record(compacted, "1.0.0", _payload("bar"), **keyed),
        path="deleted-events",
    )
    assert with_payload.status_code == 207
    assert with_payload.json()[0]["detail"] == "Payload must be empty to delete events."
    ok = _post_avro(
        client, compacted, _record(compacted, "1.0.0", b"", **keyed), path="deleted-events"
    )
    assert ok.status_code == 200, ok.text
    # Hash partitioning of an Avro event reads metadata.partition_keys.
    no_keys = _post_avro(
        client,
        compacted,
        _record(compacted, "1.0.0", b"", partition_compaction_key="k"),
        path="deleted-events",
    )
    assert "partition keys not set" in no_keys.json()[0]["detail"]


def test_the_envelope_schemas_are_served_for_clients(client: httpx.Client) -> None:
    listed = client.get("/avro-schemas/batch.publishing/versions")
    assert listed.status_code == 200
    assert [item["version"] for item in listed.json()["items"]] == ["0", "1"]
    one = client.get("/avro-schemas/batch.consumption/versions/1").json()
    assert one["avro_schema"]["name"] == "ConsumptionBatch"
    # What a client parses from it names the schema the broker reads and writes.
    assert envelope.single_object_header(one["avro_schema"]) == envelope.CONSUMPTION_HEADER
    assert_problem(client.get("/avro-schemas/envelope/versions"), 404, "batch.publishing")
    assert_problem(client.get("/avro-schemas/batch.publishing/versions/7"), 404, "no version")


def test_deleting_events_needs_the_event_stream_write_scope() -> None:
    """As Nakadi's API definition of deleted-events says; the envelope schemas any
    authenticated caller may read."""
    scopes = Scopes()
    assert scopes.table()("POST", "/event-types/orders/deleted-events") == scopes.event_stream_write
    assert scopes.table()("GET", "/avro-schemas/batch.publishing/versions") is None
