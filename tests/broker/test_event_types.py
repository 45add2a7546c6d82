"""``/event-types``: creation, reading, update and deletion with every rule of the API spec."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from changebroker import kafka
from changebroker.metrics import PROMETHEUS_ACCEPT
from tests.broker.swagger import assert_problem, validate
from tests.support.event_types import business_event_type


def _topic_of(broker_dsn: str, name: str) -> tuple[str, int]:
    import psycopg

    with psycopg.connect(broker_dsn) as conn:
        row = conn.execute(
            "SELECT topic, partitions FROM broker_event_types WHERE name = %s", (name,)
        ).fetchone()
    assert row is not None
    return row[0], row[1]


def test_manual_example_creates_business_event_type(client: httpx.Client, unique_name) -> None:
    name = unique_name("order_received")
    response = client.post("/event-types", json=business_event_type(name))
    assert response.status_code == 201, response.text

    got = client.get(f"/event-types/{name}")
    assert got.status_code == 200
    body = got.json()
    validate("EventType", body)
    assert body["name"] == name
    assert body["category"] == "business"
    assert body["partition_key_fields"] == ["order_number"]
    assert body["compatibility_mode"] == "forward"
    assert body["cleanup_policy"] == "delete"
    assert body["schema"]["version"] == "1.0.0"
    assert body["schema"]["schema"] == business_event_type(name)["schema"]["schema"]
    assert body["created_at"] == body["updated_at"]

    listed = client.get("/event-types")
    assert listed.status_code == 200
    validate("EventType", listed.json(), array=True)
    assert name in [e["name"] for e in listed.json()]


def test_manual_undefined_example_and_stored_fields(
    client: httpx.Client, unique_name, broker_dsn: str, kafka_bootstrap: str
) -> None:
    name = unique_name("order.ORDER_RECEIVED")
    authorization = {
        "admins": [{"data_type": "user", "value": "bfawlty"}],
        "readers": [{"data_type": "user", "value": "bfawlty"}],
        "writers": [{"data_type": "user", "value": "bfawlty"}],
    }
    response = client.post(
        "/event-types",
        json={
            "name": name,
            "owning_application": "order-service",
            "category": "undefined",
            "partition_strategy": "random",
            "schema": {
                "type": "json_schema",
                "schema": '{ "properties": { "order_number": { "type": "string" } } }',
            },
            "authorization": authorization,
            "audience": "company-internal",
            "options": {"retention_time": 7_200_000},
            "default_statistic": {
                "messages_per_minute": 10,
                "message_size": 100,
                "read_parallelism": 3,
                "write_parallelism": 2,
            },
            "ordering_key_fields": ["order_number"],
        },
    )
    assert response.status_code == 201, response.text
    body = client.get(f"/event-types/{name}").json()
    validate("EventType", body)
    assert body["authorization"] == authorization
    assert body["audience"] == "company-internal"
    assert body["options"] == {"retention_time": 7_200_000}
    assert body["ordering_key_fields"] == ["order_number"]
    assert body["enrichment_strategies"] == []

    topic, partitions = _topic_of(broker_dsn, name)
    assert partitions == 3  # max(read_parallelism, write_parallelism)
    admin: AdminClient = kafka.admin(kafka_bootstrap)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["retention.ms"].value == "7200000"
    assert configs["cleanup.policy"].value == "delete"


def test_partition_count_is_capped_and_defaulted(
    client: httpx.Client, unique_name, broker_dsn: str
) -> None:
    big = unique_name("big")
    statistic = {
        "messages_per_minute": 1,
        "message_size": 1,
        "read_parallelism": 500,
        "write_parallelism": 1,
    }
    assert (
        client.post(
            "/event-types", json=business_event_type(big, default_statistic=statistic)
        ).status_code
        == 201
    )
    assert _topic_of(broker_dsn, big)[1] == 12  # the module's broker: max_partitions=12
    plain = unique_name("plain")
    event_type = business_event_type(plain)
    del event_type["default_statistic"]
    assert client.post("/event-types", json=event_type).status_code == 201
    assert _topic_of(broker_dsn, plain)[1] == 1


def test_timelines_name_the_topic(client: httpx.Client, broker_dsn: str, unique_name) -> None:
    name = unique_name("order_received")
    assert client.post("/event-types", json=business_event_type(name)).status_code == 201
    response = client.get(f"/event-types/{name}/timelines")
    assert response.status_code == 200, response.text
    (timeline,) = response.json()
    assert timeline["event_type"] == name
    assert timeline["topic"] == _topic_of(broker_dsn, name)[0]
    assert timeline["order"] == 1 and timeline["storage_id"] == "default"
    assert_problem(client.get(f"/event-types/{name}-missing/timelines"), 404, "does not exist")


def test_duplicate_name_is_409(client: httpx.Client, unique_name) -> None:
    name = unique_name("dup")
    assert client.post("/event-types", json=business_event_type(name)).status_code == 201
    assert_problem(client.post("/event-types", json=business_event_type(name)), 409, name)


AVRO_UNKNOWN_TYPE = '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "strin"}]}'


def _schema(text: dict[str, Any]) -> dict[str, str]:
    return {"type": "json_schema", "schema": json.dumps(text)}


INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("bad name", {"name": "9starts-with-digit"}, "does not match"),
    ("name with space", {"name": "a b"}, "does not match"),
    ("no owner", {"owning_application": None}, "owning_application"),
    ("unknown category", {"category": "event"}, "category"),
    ("business without enrichment", {"enrichment_strategies": []}, "metadata_enrichment"),
    ("unknown enrichment", {"enrichment_strategies": ["x"]}, "enrichment_strategies"),
    (
        "undefined with enrichment",
        {"category": "undefined", "partition_strategy": "random", "partition_key_fields": None},
        "enrichment_strategies",
    ),
    ("unknown partition strategy", {"partition_strategy": "round_robin"}, "partition_strategy"),
    ("hash without keys", {"partition_key_fields": None}, "needs partition_key_fields"),
    ("hash key not in schema", {"partition_key_fields": ["nope"]}, "not declared"),
    ("keys without hash", {"partition_strategy": "random"}, "only for partition_strategy"),
    ("unknown mode", {"compatibility_mode": "backward"}, "compatibility_mode"),
    ("unknown cleanup policy", {"cleanup_policy": "archive"}, "cleanup_policy"),
    ("schema type", {"schema": {"type": "proto", "schema": "{}"}}, "'json_schema' or 'avro"),
    ("avro not a record", {"schema": {"type": "avro_schema", "schema": "{}"}}, "a record"),
    (
        "avro unknown type",
        {"schema": {"type": "avro_schema", "schema": AVRO_UNKNOWN_TYPE}},
        "failed to parse avro schema",
    ),
    ("schema not json", {"schema": {"type": "json_schema", "schema": "{"}}, "not valid JSON"),
    ("schema not draft 4", {"schema": _schema({"type": "strin"})}, "draft 04"),
    (
        "compatible with additionalProperties",
        {
            "compatibility_mode": "compatible",
            "schema": _schema(
                {"properties": {"order_number": {"type": "string"}}, "additionalProperties": True}
            ),
        },
        "additionalProperties",
    ),
    (
        "business declares metadata",
        {"schema": _schema({"properties": {"order_number": {}, "metadata": {}}})},
        "metadata",
    ),
    ("business schema not an object", {"schema": _schema({"type": "string"})}, "'object'"),
    ("statistic not positive", {"default_statistic": {"messages_per_minute": 0}}, "positive"),
    ("retention not a number", {"options": {"retention_time": "1d"}}, "retention_time"),
    (
        "authorization empty list",
        {"authorization": {"admins": [], "readers": [], "writers": []}},
        "admins",
    ),
    ("unknown audience", {"audience": "everyone"}, "audience"),
    ("ordering field missing", {"ordering_key_fields": ["nope"]}, "ordering_key_fields"),
]


@pytest.mark.parametrize(("case", "change", "detail"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_event_type_is_422(
    client: httpx.Client, unique_name: Callable[[str], str], case: str, change: dict, detail: str
) -> None:
    body = business_event_type(unique_name("bad"))
    for key, value in change.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    assert_problem(client.post("/event-types", json=body), 422, detail)
    assert_problem(client.get(f"/event-types/{body['name']}"), 404)


def test_malformed_body_is_400(client: httpx.Client) -> None:
    assert_problem(client.post("/event-types", content=b"{not json"), 400, "JSON")


def test_unknown_event_type_is_404(client: httpx.Client, unique_name) -> None:
    name = unique_name("missing")
    assert_problem(client.get(f"/event-types/{name}"), 404, f'EventType "{name}" does not exist.')
    assert_problem(client.put(f"/event-types/{name}", json=business_event_type(name)), 404)
    assert_problem(client.delete(f"/event-types/{name}"), 404)


def test_update_rules(client: httpx.Client, unique_name) -> None:
    name = unique_name("upd")
    created = business_event_type(name, partition_strategy="random", compatibility_mode="none")
    del created["partition_key_fields"]
    assert client.post("/event-types", json=created).status_code == 201
    before = client.get(f"/event-types/{name}").json()

    def put(**change: Any) -> httpx.Response:
        return client.put(f"/event-types/{name}", json={**created, **change})

    assert_problem(put(name="other"), 422, "name")
    assert_problem(put(category="data"), 422, "category")
    assert_problem(put(cleanup_policy="compact"), 422, "cleanup_policy")
    assert_problem(put(compatibility_mode="compatible"), 422, "one step at a time")
    statistic = {**created["default_statistic"], "read_parallelism": 4}
    assert_problem(put(default_statistic=statistic), 422, "default_statistic")

    authorization = {
        "admins": [{"data_type": "user", "value": "a"}],
        "readers": [{"data_type": "*", "value": "*"}],
        "writers": [{"data_type": "user", "value": "a"}],
    }
    ok = put(
        owning_application="new-owner", authorization=authorization, audience="external-partner"
    )
    assert ok.status_code == 200, ok.text
    after = client.get(f"/event-types/{name}").json()
    validate("EventType", after)
    assert after["owning_application"] == "new-owner"
    assert after["authorization"] == authorization
    assert after["created_at"] == before["created_at"]
    assert after["updated_at"] >= before["updated_at"]
    assert after["schema"]["version"] == "1.0.0"  # schema unchanged
    assert assert_problem(put(owning_application="x"), 422) == (
        "Changing authorization object to `null` is not possible due to existing one"
    )

    # random -> hash is allowed; hash -> random is not
    hashed = put(
        authorization=authorization,
        partition_strategy="hash",
        partition_key_fields=["order_number"],
    )
    assert hashed.status_code == 200, hashed.text
    assert_problem(put(authorization=authorization), 422, "partition_strategy")

    # none -> forward -> compatible, never back
    keep = {
        "authorization": authorization,
        "partition_strategy": "hash",
        "partition_key_fields": ["order_number"],
    }
    assert put(**keep, compatibility_mode="forward").status_code == 200
    assert_problem(put(**keep, compatibility_mode="none"), 422, "compatibility_mode")
    assert put(**keep, compatibility_mode="compatible").status_code == 200
    assert client.get(f"/event-types/{name}").json()["compatibility_mode"] == "compatible"


def test_hash_to_random_is_refused_first_with_nakadis_words(
    client: httpx.Client, unique_name
) -> None:
    name = unique_name("strategy")
    assert client.post("/event-types", json=business_event_type(name)).status_code == 201
    # A client's read-modify-write: the type as GET gave it, only the strategy changed, so
    # partition_key_fields (which random does not take) are still in the body.
    current = client.get(f"/event-types/{name}").json()
    response = client.put(f"/event-types/{name}", json={**current, "partition_strategy": "random"})
    detail = assert_problem(response, 422)
    assert (
        detail
        == "changing partition_strategy is only allowed if the original strategy was 'random'"
    )
    assert client.get(f"/event-types/{name}").json()["partition_strategy"] == "hash"


def test_retention_update_reaches_kafka(
    client: httpx.Client, unique_name, broker_dsn: str, kafka_bootstrap: str
) -> None:
    name = unique_name("ret")
    created = business_event_type(name)
    assert client.post("/event-types", json=created).status_code == 201
    response = client.put(
        f"/event-types/{name}", json={**created, "options": {"retention_time": 3_600_000}}
    )
    assert response.status_code == 200, response.text
    topic, _ = _topic_of(broker_dsn, name)
    admin: AdminClient = kafka.admin(kafka_bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["retention.ms"].value == "3600000"
    assert client.get(f"/event-types/{name}").json()["options"] == {"retention_time": 3_600_000}


def test_compact_cleanup_policy(
    client: httpx.Client, unique_name, broker_dsn, kafka_bootstrap
) -> None:
    name = unique_name("compact")
    assert (
        client.post(
            "/event-types", json=business_event_type(name, cleanup_policy="compact")
        ).status_code
        == 201
    )
    topic, _ = _topic_of(broker_dsn, name)
    admin: AdminClient = kafka.admin(kafka_bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["cleanup.policy"].value == "compact"
    undefined = {
        "name": unique_name("compact_undefined"),
        "owning_application": "x",
        "category": "undefined",
        "cleanup_policy": "compact",
        "schema": {"type": "json_schema", "schema": "{}"},
    }
    assert_problem(client.post("/event-types", json=undefined), 422, "compact")


def test_delete_removes_topic_and_name_can_be_reused(
    client: httpx.Client, unique_name, broker_dsn: str, kafka_bootstrap: str
) -> None:
    name = unique_name("del")
    assert client.post("/event-types", json=business_event_type(name)).status_code == 201
    topic, _ = _topic_of(broker_dsn, name)
    response = client.delete(f"/event-types/{name}")
    assert response.status_code == 200
    assert_problem(client.get(f"/event-types/{name}"), 404)
    admin: AdminClient = kafka.admin(kafka_bootstrap)
    from changebroker.stack.processes import wait_until

    wait_until(
        lambda: topic not in admin.list_topics(timeout=10).topics,
        timeout=30,
        what=f"topic {topic} to be deleted",
    )
    assert client.post("/event-types", json=business_event_type(name)).status_code == 201


def test_registry_strategies(client: httpx.Client) -> None:
    assert client.get("/registry/partition-strategies").json() == ["random", "hash", "user_defined"]
    assert client.get("/registry/enrichment-strategies").json() == ["metadata_enrichment"]


def test_health_and_metrics(client: httpx.Client) -> None:
    assert client.get("/health").status_code == 200
    # A Prometheus scraper names its text format and gets it.
    metrics = client.get("/metrics", headers={"accept": PROMETHEUS_ACCEPT})
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    assert "# TYPE changebroker_broker_events_published_total counter" in metrics.text
    # Anyone else gets Nakadi's JSON (MetricsAT.whenGetMetricsThenStructureIsOk), the same
    # samples in it.
    nakadi = client.get("/metrics")
    assert nakadi.headers["content-type"] == "application/json"
    body = nakadi.json()
    assert {"version", "counters", "gauges", "histograms", "meters", "timers"} <= set(body)
    assert "process_start_time_seconds" in body["gauges"]
    assert body["histograms"], "the request durations"
    assert all(set(h) == {"count", "sum"} for h in body["histograms"].values())


def test_unknown_route_is_problem(client: httpx.Client) -> None:
    assert_problem(client.get("/no-such-thing"), 404)
    assert_problem(client.patch("/event-types"), 405)


def test_manual_authorization_examples(client: httpx.Client, unique_name) -> None:
    """The manual's "Authorization" (docs/specs/nakadi-manual.txt): create with one, update it."""
    name = unique_name("order_received")
    body = business_event_type(
        name,
        authorization={
            "admins": [{"data_type": "user", "value": "bfawlty"}],
            "readers": [{"data_type": "user", "value": "bfawlty"}],
            "writers": [{"data_type": "user", "value": "bfawlty"}],
        },
    )
    assert client.post("/event-types", json=body).status_code == 201
    assert client.put(f"/event-types/{name}", json=body).status_code == 200
    got = client.get(f"/event-types/{name}").json()
    assert got["authorization"] == body["authorization"]
    assert got["schema"]["version"] == "1.0.0"


def test_deeply_nested_bodies_and_schemas_are_refused(client: httpx.Client, unique_name) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    assert_problem(client.post("/event-types", content=deep.encode()), 400, "deeply")
    nested = '{"properties": {"a": ' * 3000 + "{}" + "}}" * 3000
    body = business_event_type(
        unique_name("deep"),
        partition_strategy="random",
        schema={"type": "json_schema", "schema": nested},
    )
    del body["partition_key_fields"]
    assert_problem(client.post("/event-types", json=body), 422, "deeply")


def test_schema_too_deep_to_compile_is_refused(client: httpx.Client, unique_name) -> None:
    arrays = '{"type": "array", "items": ' * 30 + '{"type": "string"}' + "}" * 30
    body = business_event_type(
        unique_name("arrays"),
        partition_strategy="random",
        schema={"type": "json_schema", "schema": '{"properties": {"a": ' + arrays + "}}"},
    )
    del body["partition_key_fields"]
    assert_problem(client.post("/event-types", json=body), 422, "cannot be validated")
