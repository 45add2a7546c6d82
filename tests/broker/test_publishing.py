"""``POST /event-types/{name}/events``: the manual's example, validation, partitions, enrichment."""

from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
import pytest
import zstandard

from changebroker.broker.app import create_app
from changebroker.broker.publishing.partitioning import java_string_hash
from changebroker.broker.settings import Settings
from changebroker.stack.processes import wait_until
from changebroker.stack.run import serve_in_thread
from tests.broker.kafka_read import read_all, topic_of
from tests.broker.swagger import assert_problem, validate
from tests.support.event_types import business_event_type
from tests.support.metrics import scrape

MANUAL_EVENTS: list[dict[str, Any]] = [
    {
        "order_number": "24873243241",
        "metadata": {
            "eid": "d765de34-09c0-4bbb-8b1e-7160a33a0791",
            "occurred_at": "2016-03-15T23:47:15+01:00",
        },
    },
    {
        "order_number": "24873243242",
        "metadata": {
            "eid": "a7671c51-49d1-48e6-bb03-b50dcf14f3d3",
            "occurred_at": "2016-03-15T23:47:16+01:00",
        },
    },
]


def expected_java_hash(text: str) -> int:
    """By the definition: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 units, as a 32-bit int."""
    units = [
        int.from_bytes(text.encode("utf-16-be")[i : i + 2])
        for i in range(0, len(text.encode("utf-16-be")), 2)
    ]
    n = len(units)
    total = sum(u * 31 ** (n - 1 - i) for i, u in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


def nakadi_partition(keys: list[str], partitions: int) -> int:
    total = sum(expected_java_hash(k) for k in keys) % 2**32
    total = total - 2**32 if total >= 2**31 else total
    return int(sorted(str(p) for p in range(partitions))[abs(total) % partitions])


def event(order_number: Any = "1", **metadata: Any) -> dict[str, Any]:
    return {
        "order_number": order_number,
        "metadata": {
            "eid": str(uuid.uuid4()),
            "occurred_at": "2026-11-22T10:00:00Z",
            **metadata,
        },
    }


@pytest.mark.parametrize(
    ("text", "java"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Aa", 2112),
        ("BB", 2112),
        ("polygenelubricants", -(2**31)),
        ("24873243241", None),
        ("ü€😀", None),
    ],
)
def test_java_string_hash(text: str, java: int | None) -> None:
    assert java_string_hash(text) == expected_java_hash(text)
    if java is not None:
        assert java_string_hash(text) == java


def test_manual_publishing_example(
    client: httpx.Client, unique_name, broker_dsn: str, kafka_bootstrap: str
) -> None:
    name = unique_name("order_received")
    assert client.post("/event-types", json=business_event_type(name)).status_code == 201
    response = client.post(
        f"/event-types/{name}/events", json=MANUAL_EVENTS, headers={"X-Flow-Id": "flow-manual-1"}
    )
    assert response.status_code == 200, response.text

    topic, partitions = topic_of(broker_dsn, name)
    stored = read_all(kafka_bootstrap, topic, partitions)
    assert [s.event["order_number"] for s in stored] == ["24873243241", "24873243242"]
    for sent, got in zip(MANUAL_EVENTS, stored, strict=True):
        metadata = got.event["metadata"]
        assert {k: metadata[k] for k in ("eid", "occurred_at")} == sent["metadata"]
        assert metadata["event_type"] == name
        assert metadata["flow_id"] == "flow-manual-1"
        assert metadata["version"] == "1.0.0"
        assert metadata["partition"] == str(got.partition)
        assert metadata["received_at"].endswith("Z")
        validate("BusinessEvent", got.event)


def user_defined_event_type(make_event_type: Callable[..., str], partitions: int) -> str:
    """An event type whose events name their partition, of ``partitions`` partitions."""
    statistic = {
        "messages_per_minute": 1,
        "message_size": 1,
        "read_parallelism": partitions,
        "write_parallelism": 1,
    }
    return str(
        make_event_type(
            partition_strategy="user_defined",
            partition_key_fields=None,
            default_statistic=statistic,
        )
    )


def undefined_event_type(name: str, schema: str) -> dict[str, Any]:
    """The manual's undefined event type: events are stored as they are sent."""
    return {
        "name": name,
        "owning_application": "order-service",
        "category": "undefined",
        "partition_strategy": "random",
        "schema": {"type": "json_schema", "schema": schema},
    }


def test_manual_undefined_example_is_stored_as_sent(
    client: httpx.Client, unique_name, broker_dsn: str, kafka_bootstrap: str
) -> None:
    name = unique_name("order.ORDER_RECEIVED")
    created = client.post(
        "/event-types",
        json=undefined_event_type(
            name, '{ "properties": { "order_number": { "type": "string" } } }'
        ),
    )
    assert created.status_code == 201
    assert client.post(f"/event-types/{name}/events", json=MANUAL_EVENTS).status_code == 200
    topic, partitions = topic_of(broker_dsn, name)
    assert [s.event for s in read_all(kafka_bootstrap, topic, partitions)] == MANUAL_EVENTS
    # And back through the API, as the manual's "Consuming Events" reads them.
    stream = client.get(
        f"/event-types/{name}/events",
        params={"stream_limit": 2, "batch_limit": 1},
        headers={"X-Nakadi-Cursors": '[{"partition": "0", "offset": "BEGIN"}]'},
    )
    assert stream.status_code == 200, stream.text
    batches = [json.loads(line) for line in stream.text.splitlines() if line]
    validate("EventStreamBatch", batches, array=True)
    assert [e for b in batches for e in b.get("events", [])] == MANUAL_EVENTS


def test_hash_partitioning_matches_nakadi(
    client: httpx.Client, make_event_type, broker_dsn: str, kafka_bootstrap: str
) -> None:
    statistic = {
        "messages_per_minute": 1,
        "message_size": 1,
        "read_parallelism": 12,
        "write_parallelism": 1,
    }
    name = make_event_type(default_statistic=statistic)
    keys = ["24873243241", "24873243242", "hello", "Aa", "polygenelubricants", "ü€😀", "x" * 40]
    keys += [f"order-{i}" for i in range(40)]
    response = client.post(f"/event-types/{name}/events", json=[event(k) for k in keys])
    assert response.status_code == 200, response.text
    topic, partitions = topic_of(broker_dsn, name)
    assert partitions == 12  # partition ids sort as strings: "10" and "11" before "2"
    stored = read_all(kafka_bootstrap, topic, partitions)
    assert len(stored) == len(keys)
    for s in stored:
        assert s.partition == nakadi_partition([s.event["order_number"]], 12), s.event
    assert len({s.partition for s in stored}) > 1


def test_hash_of_several_fields_and_of_data_events(
    client: httpx.Client, unique_name, broker_dsn: str, kafka_bootstrap: str
) -> None:
    name = unique_name("data")
    schema = {
        "properties": {"id": {"type": "integer"}, "region": {"type": "string"}},
        "required": ["id", "region"],
    }
    created = client.post(
        "/event-types",
        json={
            "name": name,
            "owning_application": "x",
            "category": "data",
            "enrichment_strategies": ["metadata_enrichment"],
            "partition_strategy": "hash",
            "partition_key_fields": ["id", "region"],
            "default_statistic": {
                "messages_per_minute": 1,
                "message_size": 1,
                "read_parallelism": 5,
                "write_parallelism": 5,
            },
            "schema": {"type": "json_schema", "schema": json.dumps(schema)},
        },
    )
    assert created.status_code == 201, created.text
    events = [
        {
            "data": {"id": i, "region": f"r{i % 3}"},
            "data_type": "order",
            "data_op": "C",
            "metadata": {"eid": str(uuid.uuid4()), "occurred_at": "2026-11-22T10:00:00.123+02:00"},
        }
        for i in range(20)
    ]
    response = client.post(f"/event-types/{name}/events", json=events)
    assert response.status_code == 200, response.text
    topic, partitions = topic_of(broker_dsn, name)
    for s in read_all(kafka_bootstrap, topic, partitions):
        data = s.event["data"]
        # Nakadi renders the integer id with toString(): "7"
        assert s.partition == nakadi_partition([str(data["id"]), data["region"]], 5)
        validate("DataChangeEvent", s.event)

    bad = [{**events[0], "data_op": "X"}]
    items = client.post(f"/event-types/{name}/events", json=bad)
    assert items.status_code == 422
    assert items.json()[0]["step"] == "validating"


def test_invalid_event_rejects_the_whole_batch(
    client: httpx.Client, make_event_type, broker_dsn: str, kafka_bootstrap: str
) -> None:
    name = make_event_type()
    batch = [event("1"), event(42), event("3")]  # order_number must be a string
    response = client.post(f"/event-types/{name}/events", json=batch)
    assert response.status_code == 422
    items = response.json()
    validate("BatchItemResponse", items, array=True)
    assert [i["publishing_status"] for i in items] == ["aborted", "failed", "aborted"]
    assert items[1]["step"] == "validating"
    assert "order_number" in items[1]["detail"]
    assert items[2]["step"] == "none"
    assert [i["eid"] for i in items] == [e["metadata"]["eid"] for e in batch]
    topic, partitions = topic_of(broker_dsn, name)
    assert read_all(kafka_bootstrap, topic, partitions) == []


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"metadata": {"occurred_at": "2026-11-22T10:00:00Z"}}, "eid"),
        ({"metadata": {"eid": "not-a-uuid", "occurred_at": "2026-11-22T10:00:00Z"}}, "eid"),
        ({"metadata": {"eid": str(uuid.uuid4()), "occurred_at": "yesterday"}}, "date-time"),
        ({"metadata": None}, "metadata"),
    ],
)
def test_metadata_is_validated(
    client: httpx.Client, make_event_type, change: dict[str, Any], detail: str
) -> None:
    name = make_event_type()
    sent = {**event("1"), **change}
    if change.get("metadata", 1) is None:
        del sent["metadata"]
    response = client.post(f"/event-types/{name}/events", json=[sent])
    assert response.status_code == 422
    assert response.json()[0]["publishing_status"] == "failed"
    assert detail in response.json()[0]["detail"]


def test_event_size_limit_counts_bytes_as_sent(client: httpx.Client, make_event_type) -> None:
    name = make_event_type(partition_strategy="random", partition_key_fields=None)
    small = json.dumps(event("1"))
    # Whitespace inside an event counts: padded past 999000 bytes, the event is too large.
    padded = small[:1] + " " * (999_001 - len(small)) + small[1:]
    response = client.post(
        f"/event-types/{name}/events",
        content=f"[{small}, {padded}]".encode(),
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422
    items = response.json()
    assert items[1]["publishing_status"] == "failed"
    assert items[1]["step"] == "validating"
    assert "999001" in items[1]["detail"]
    fits = small[:1] + " " * (999_000 - len(small)) + small[1:]
    response = client.post(
        f"/event-types/{name}/events",
        content=f"[{fits}]".encode(),
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 200, response.text[:500]


def test_gzip_body(client: httpx.Client, make_event_type, broker_dsn, kafka_bootstrap) -> None:
    name = make_event_type()
    body = gzip.compress(json.dumps([event("g1"), event("g2")]).encode())
    response = client.post(
        f"/event-types/{name}/events",
        content=body,
        headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
    )
    assert response.status_code == 200, response.text
    topic, partitions = topic_of(broker_dsn, name)
    assert sorted(
        s.event["order_number"] for s in read_all(kafka_bootstrap, topic, partitions)
    ) == [
        "g1",
        "g2",
    ]
    broken = client.post(
        f"/event-types/{name}/events", content=b"not gzip", headers={"Content-Encoding": "gzip"}
    )
    assert_problem(broken, 400, "gzip")


def test_user_defined_partition(
    client: httpx.Client, make_event_type, broker_dsn: str, kafka_bootstrap: str
) -> None:
    name = user_defined_event_type(make_event_type, partitions=3)
    response = client.post(
        f"/event-types/{name}/events", json=[event("a", partition="2"), event("b", partition="0")]
    )
    assert response.status_code == 200, response.text
    topic, partitions = topic_of(broker_dsn, name)
    placed = {
        s.event["order_number"]: s.partition for s in read_all(kafka_bootstrap, topic, partitions)
    }
    assert placed == {"a": 2, "b": 0}
    # "\u00b2".isdigit() is true, and int() refuses it.
    for bad in (event("c", partition="3"), event("d"), event("e", partition="\u00b2")):
        rejected = client.post(f"/event-types/{name}/events", json=[bad])
        assert rejected.status_code == 422
        assert rejected.json()[0]["step"] == "partitioning"


def test_event_type_mismatch_fails_enriching(client: httpx.Client, make_event_type) -> None:
    name = make_event_type()
    response = client.post(f"/event-types/{name}/events", json=[event("1", event_type="other")])
    assert response.status_code == 422
    assert response.json()[0]["step"] == "enriching"


def test_compatible_mode_rejects_undeclared_attributes(
    client: httpx.Client, make_event_type
) -> None:
    compatible = make_event_type(compatibility_mode="compatible")
    forward = make_event_type()
    extra = {**event("1"), "unknown": True}
    assert client.post(f"/event-types/{compatible}/events", json=[extra]).status_code == 422
    assert client.post(f"/event-types/{forward}/events", json=[extra]).status_code == 200


def test_compaction_key(
    client: httpx.Client, make_event_type, broker_dsn: str, kafka_bootstrap: str
) -> None:
    name = make_event_type(cleanup_policy="compact")
    missing = client.post(f"/event-types/{name}/events", json=[event("1")])
    assert missing.status_code == 422
    assert "partition_compaction_key" in missing.json()[0]["detail"]
    ok = client.post(
        f"/event-types/{name}/events", json=[event("1", partition_compaction_key="k1")]
    )
    assert ok.status_code == 200
    topic, partitions = topic_of(broker_dsn, name)
    assert [s.key for s in read_all(kafka_bootstrap, topic, partitions)] == [b"k1"]


def test_publish_errors(
    client: httpx.Client, make_event_type, unique_name: Callable[[str], str]
) -> None:
    missing = unique_name("missing")
    assert_problem(client.post(f"/event-types/{missing}/events", json=[event()]), 404, missing)
    name = make_event_type()
    assert_problem(client.post(f"/event-types/{name}/events", content=b"[{"), 400)
    assert_problem(client.post(f"/event-types/{name}/events", json={"not": "an array"}), 400)
    not_object = client.post(f"/event-types/{name}/events", json=["text"])
    assert not_object.status_code == 422
    assert client.post(f"/event-types/{name}/events", json=[]).status_code == 200


def test_metrics_count_published_events(client: httpx.Client, make_event_type) -> None:
    name = make_event_type()
    assert (
        client.post(f"/event-types/{name}/events", json=[event("1"), event("2")]).status_code == 200
    )
    found = scrape(str(client.base_url.join("/metrics")))
    assert found.value("changebroker_broker_events_published_total", event_type=name) == 2


def test_partial_kafka_failure_is_207(
    client: httpx.Client, make_event_type, broker_dsn: str, kafka_bootstrap: str
) -> None:
    name = user_defined_event_type(make_event_type, partitions=2)
    # The broker believes in a third partition the topic lacks: Kafka refuses only those events.
    with psycopg.connect(broker_dsn) as conn:
        conn.execute(
            "UPDATE broker_event_types SET partitions = 3, revision = revision + 1 WHERE name = %s",
            (name,),
        )
    batch = [event("a", partition="0"), event("b", partition="2"), event("c", partition="1")]
    # The first time the producer learns the topic's partitions from the delivery report, the
    # second time produce() refuses at once: both must name the same failed item.
    for _ in range(2):
        response = client.post(f"/event-types/{name}/events", json=batch)
        assert response.status_code == 207, response.text
        items = response.json()
        validate("BatchItemResponse", items, array=True)
        assert [i["publishing_status"] for i in items] == ["submitted", "failed", "submitted"]
        assert items[1]["step"] == "publishing"
        assert "partition" in items[1]["detail"].lower()
        assert items[1]["eid"] == batch[1]["metadata"]["eid"]
    topic, _ = topic_of(broker_dsn, name)
    stored = read_all(kafka_bootstrap, topic, 2)
    assert sorted(s.event["order_number"] for s in stored) == ["a", "a", "c", "c"]


def test_gzip_bomb_and_oversized_bodies_are_413(client: httpx.Client, make_event_type) -> None:
    name = make_event_type()
    bomb = gzip.compress(b"[" + b" " * (65 * 1024 * 1024) + b"]")
    response = client.post(
        f"/event-types/{name}/events", content=bomb, headers={"Content-Encoding": "gzip"}
    )
    assert_problem(response, 413, "smaller batches")
    unsupported = client.post(
        f"/event-types/{name}/events", content=b"[]", headers={"Content-Encoding": "br"}
    )
    assert_problem(unsupported, 415, "gzip, zstd or identity")


def _zstd_stream(data: bytes) -> bytes:
    """What fahrschein's ContentEncoding.ZSTD writes: a streamed frame, no content size."""
    compressor = zstandard.ZstdCompressor().compressobj()
    return compressor.compress(data) + compressor.flush()


def test_zstd_bodies_as_java_clients_send_them(
    client: httpx.Client, make_event_type, broker_dsn, kafka_bootstrap
) -> None:
    name = make_event_type()
    plain = json.dumps([event(f"z{i}") for i in range(300)]).encode()
    headers = {"Content-Encoding": "zstd", "Content-Type": "application/json"}
    one_frame = client.post(
        f"/event-types/{name}/events", content=_zstd_stream(plain), headers=headers
    )
    assert one_frame.status_code == 200, one_frame.text
    # Concatenated frames are one stream, as zstd reads them.
    two = [json.dumps([event("a")]).encode()[:-1] + b",", json.dumps(event("b")).encode() + b"]"]
    frames = b"".join(zstandard.ZstdCompressor().compress(part) for part in two)
    assert (
        client.post(f"/event-types/{name}/events", content=frames, headers=headers).status_code
        == 200
    )
    topic, partitions = topic_of(broker_dsn, name)
    numbers = sorted(s.event["order_number"] for s in read_all(kafka_bootstrap, topic, partitions))
    assert numbers == sorted([f"z{i}" for i in range(300)] + ["a", "b"])
    # Any body the broker reads, not only events.
    subscription = client.post(
        "/subscriptions",
        content=_zstd_stream(
            json.dumps({"owning_application": "z", "event_types": [name]}).encode()
        ),
        headers=headers,
    )
    assert subscription.status_code == 201, subscription.text
    compressed = _zstd_stream(plain)
    for broken in (b"not zstd", compressed[:-4]):
        response = client.post(f"/event-types/{name}/events", content=broken, headers=headers)
        assert_problem(response, 400, "zstd")


def test_zstd_bomb_is_413_and_an_event_over_the_limit_422(
    client: httpx.Client, make_event_type
) -> None:
    name = make_event_type()
    headers = {"Content-Encoding": "zstd"}
    # 6 KB that would expand to 200 MB: refused once 64 MB are out.
    bomb = zstandard.ZstdCompressor().compress(b"[" + b" " * (200 * 1024 * 1024) + b"]")
    assert len(bomb) < 100_000
    assert_problem(client.post(f"/event-types/{name}/events", content=bomb, headers=headers), 413)
    # The event size limit is on the event as decoded, as if it had been sent plain.
    big = event("big")
    big["padding"] = "x" * 1_000_000
    response = client.post(
        f"/event-types/{name}/events",
        content=_zstd_stream(json.dumps([big]).encode()),
        headers=headers,
    )
    assert response.status_code == 422, response.text
    assert response.json()[0]["detail"].startswith("Event too large")


def test_values_reach_kafka_exactly_as_json_reads_them(
    client: httpx.Client, unique_name, broker_dsn: str, kafka_bootstrap: str
) -> None:
    name = unique_name("exact")
    created = client.post("/event-types", json=undefined_event_type(name, "{}"))
    assert created.status_code == 201, created.text
    # Past 64 bits and a lone surrogate take the encoder's fallback; the rest its fast path.
    body = (
        '[{"big": 123456789012345678901234567890, "pi": 3.141592653589793},'
        ' {"text": "é 😀 \\u2028 \\"q\\"", "n": -9223372036854775808, "f": 1e-7},'
        ' {"lone": "\\ud800"}]'
    )
    published = client.post(
        f"/event-types/{name}/events",
        content=body,
        headers={"Content-Type": "application/json"},
    )
    assert published.status_code == 200, published.text
    topic, partitions = topic_of(broker_dsn, name)
    stored = [s.event for s in read_all(kafka_bootstrap, topic, partitions)]
    assert sorted(stored, key=json.dumps) == sorted(json.loads(body), key=json.dumps)


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_numbers_json_cannot_hold_are_refused(
    client: httpx.Client, make_event_type: Callable[..., str], number: str
) -> None:
    name = make_event_type()
    event = json.dumps(
        {
            "order_number": "1",
            "metadata": {"eid": str(uuid.uuid4()), "occurred_at": "2026-11-22T10:00:00Z"},
        }
    )
    body = f'[{event[:-1]}, "amount": {number}}}]'
    response = client.post(
        f"/event-types/{name}/events",
        content=body,
        headers={"Content-Type": "application/json"},
    )
    assert_problem(response, 400)
    assert "not valid JSON" in response.json()["detail"]


def test_another_process_publishes_by_the_event_type_as_it_now_is(
    client: httpx.Client, broker_dsn: str, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Publishing keeps event types' revisions in memory; a change made through another
    broker process reaches it by Postgres's notification, a delete and re-create included."""
    name = unique_name("elsewhere")
    event = {
        "order_number": "1",
        "metadata": {"eid": str(uuid.uuid4()), "occurred_at": "2016-03-15T23:47:15+01:00"},
    }
    assert client.post("/event-types", json=business_event_type(name)).status_code == 201
    settings = Settings(pg_dsn=broker_dsn, kafka_bootstrap=kafka_bootstrap, max_partitions=12)
    with (
        serve_in_thread(create_app(settings)) as url,
        httpx.Client(base_url=url, timeout=60) as other,
    ):
        assert other.post(f"/event-types/{name}/events", json=[event]).status_code == 200
        assert client.delete(f"/event-types/{name}").status_code == 200
        wait_until(
            lambda: other.post(f"/event-types/{name}/events", json=[event]).status_code == 404,
            timeout=10,
            what="the other process to forget the deleted event type",
        )
        required = json.dumps(
            {
                "properties": {"order_number": {"type": "string"}, "amount": {"type": "number"}},
                "required": ["amount"],
            }
        )
        recreated = business_event_type(name, schema={"type": "json_schema", "schema": required})
        created = client.post("/event-types", json=recreated)
        assert created.status_code == 201, created.text
        refused = other.post(f"/event-types/{name}/events", json=[event])
        assert refused.status_code == 422, refused.text
        accepted = other.post(f"/event-types/{name}/events", json=[{**event, "amount": 1}])
        assert accepted.status_code == 200, accepted.text
