"""``/event-types`` as Nakadi answers it: each test sends the request of Nakadi's own acceptance
test (zalando/nakadi ``acceptance-test/``, named per test) and expects its answer."""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from changebroker import config, kafka
from changebroker.auth import AuthSettings
from changebroker.broker import main
from changebroker.broker.app import create_app
from changebroker.broker.settings import Settings
from changebroker.stack.run import serve_in_thread
from tests.broker.subscription_support import create
from tests.broker.swagger import assert_problem, validate
from tests.support.event_types import business_event_type


def _topic_config(broker_dsn: str, kafka_bootstrap: str, name: str) -> dict[str, str]:
    with psycopg.connect(broker_dsn) as conn:
        row = conn.execute("SELECT topic FROM broker_event_types WHERE name = %s", (name,))
        (topic,) = row.fetchone() or ("",)
    admin: AdminClient = kafka.admin(kafka_bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    return {key: configs[key].value for key in ("cleanup.policy", "retention.ms")}


def _event(**metadata: str) -> dict[str, Any]:
    stamp = {"occurred_at": "1992-08-03T10:00:00Z", "eid": str(uuid.uuid4())}
    return {"order_number": "1", "metadata": {**stamp, **metadata}}


def test_put_without_annotations_and_labels_keeps_them(client: httpx.Client, unique_name) -> None:
    """EventTypeAT.whenPUTEventTypeWithoutAnnotationsAndLabelsThenOriginalValuesAreKept."""
    name = unique_name("annotated")
    body = business_event_type(
        name,
        annotations={"nakadi.io/annotation-key": "original-annotation"},
        labels={"nakadi.io/label-key": "original-label"},
    )
    assert client.post("/event-types", json=body).status_code == 201
    for omitted in ({}, {"annotations": None, "labels": None}):
        bare = {k: v for k, v in body.items() if k not in ("annotations", "labels")}
        response = client.put(f"/event-types/{name}", json={**bare, **omitted})
        assert response.status_code == 200, response.text
        assert response.text == ""
        got = client.get(f"/event-types/{name}").json()
        assert got["annotations"] == {"nakadi.io/annotation-key": "original-annotation"}
        assert got["labels"] == {"nakadi.io/label-key": "original-label"}
    changed = {
        **body,
        "annotations": {"nakadi.io/annotation-key": "new-annotation"},
        "labels": {"nakadi.io/label-key": "new-label"},
    }
    assert client.put(f"/event-types/{name}", json=changed).status_code == 200
    got = client.get(f"/event-types/{name}").json()
    assert got["annotations"] == {"nakadi.io/annotation-key": "new-annotation"}
    assert got["labels"] == {"nakadi.io/label-key": "new-label"}


def test_put_with_null_retention_keeps_the_retention(
    client: httpx.Client, unique_name, broker_dsn: str, kafka_bootstrap: str
) -> None:
    """Nakadi's EventTypeService.updateRetentionTime: no options, or a null retention_time,
    keeps the event type's options and its topic's retention."""
    name = unique_name("retained")
    body = business_event_type(name, options={"retention_time": 7_200_000})
    assert client.post("/event-types", json=body).status_code == 201
    for options in ({"options": {"retention_time": None}}, {"options": None}, {}):
        bare = {k: v for k, v in body.items() if k != "options"}
        response = client.put(f"/event-types/{name}", json={**bare, **options})
        assert response.status_code == 200, response.text
        assert client.get(f"/event-types/{name}").json()["options"] == {"retention_time": 7_200_000}
        assert _topic_config(broker_dsn, kafka_bootstrap, name)["retention.ms"] == "7200000"


def test_empty_annotation_or_label_key_is_422_in_nakadis_words(
    client: httpx.Client, unique_name
) -> None:
    """EventTypeAT.whenPOSTEventTypeWithInvalidAnnotationOrLabelThenError."""
    for field in ("annotations", "labels"):
        name = unique_name(field)
        response = client.post(
            "/event-types", json=business_event_type(name, **{field: {"": "test-value"}})
        )
        detail = assert_problem(response, 422)
        assert f'Field "{field}[]" Key cannot be empty' in detail
        assert f'Field "{field}[]" Key name should start and end with a letter or a digit' in detail
        assert_problem(client.get(f"/event-types/{name}"), 404)
    name = unique_name("labelled")
    long_value = client.post(
        "/event-types", json=business_event_type(name, labels={"team": "x" * 64})
    )
    assert 'Field "labels[team]" size must be between 0 and 63' in assert_problem(long_value, 422)
    fine = business_event_type(
        name, annotations={"test.io/test-key": "test-value"}, labels={"team": "a_b.c-d"}
    )
    assert client.post("/event-types", json=fine).status_code == 201
    assert client.get(f"/event-types/{name}").json()["annotations"] == {
        "test.io/test-key": "test-value"
    }


def test_event_owner_selector(client: httpx.Client, unique_name) -> None:
    """EventTypeAT.whenEventAuthSelectorCreateWithMetadataAndValueThen422 and
    whenEventAuthSelectorSetOnCreateThenOK."""
    name = unique_name("owned")
    selector = {"type": "metadata", "name": "x", "value": "foo"}
    refused = client.post(
        "/event-types", json=business_event_type(name, event_owner_selector=selector)
    )
    assert assert_problem(refused, 422) == (
        "event_owner_selector specifying value for type 'metadata' is not supported"
    )
    selector = {"type": "path", "name": "x", "value": "foo"}
    created = client.post(
        "/event-types", json=business_event_type(name, event_owner_selector=selector)
    )
    assert created.status_code == 201, created.text
    assert client.get(f"/event-types/{name}").json()["event_owner_selector"] == selector


def test_compact_and_delete_cleanup_policy(
    client: httpx.Client, unique_name, broker_dsn: str, kafka_bootstrap: str
) -> None:
    """EventTypeAT.whenUpdateEventTypeWithCompactAndDeleteCleanupPolicyThenOk (its flow: a
    ``delete`` type becomes ``compact_and_delete``; Kafka then compacts and deletes)."""
    name = unique_name("compact_and_delete")
    body = business_event_type(name, cleanup_policy="delete")
    assert client.post("/event-types", json=body).status_code == 201
    assert client.post(f"/event-types/{name}/events", json=[_event()]).status_code == 200
    updated = client.put(
        f"/event-types/{name}", json={**body, "cleanup_policy": "compact_and_delete"}
    )
    assert updated.status_code == 200, updated.text
    assert updated.text == ""
    got = client.get(f"/event-types/{name}").json()
    validate("EventType", got)  # cleanup_policy is an x-extensible-enum there
    assert got["cleanup_policy"] == "compact_and_delete"
    config = _topic_config(broker_dsn, kafka_bootstrap, name)
    assert config["cleanup.policy"] == "compact,delete"
    assert config["retention.ms"] == "345600000"
    # Compacted events need the key compaction keeps the last event of.
    missing_key = client.post(f"/event-types/{name}/events", json=[_event()])
    assert missing_key.status_code == 422, missing_key.text
    keyed = [_event(partition_compaction_key="order-1")]
    assert client.post(f"/event-types/{name}/events", json=keyed).status_code == 200
    # Only delete -> compact_and_delete is a change Nakadi allows.
    back = client.put(f"/event-types/{name}", json={**body, "cleanup_policy": "delete"})
    assert assert_problem(back, 422) == (
        "Invalid cleanup_policy change: COMPACT_AND_DELETE cannot be changed to DELETE"
    )
    other = unique_name("compacted_from_the_start")
    new = client.post(
        "/event-types", json=business_event_type(other, cleanup_policy="compact_and_delete")
    )
    assert new.status_code == 201, new.text
    assert _topic_config(broker_dsn, kafka_bootstrap, other)["cleanup.policy"] == "compact,delete"


def test_schema_pages_past_the_end_link_nowhere(client: httpx.Client, unique_name) -> None:
    """SchemaControllerAT.whenGetSchemasThenListWithGreatOffset (one version here, two there:
    either way the page is past the end)."""
    name = unique_name("schemas")
    assert client.post("/event-types", json=business_event_type(name)).status_code == 201
    for offset, limit in ((2, 5), (5, 2)):
        page = client.get(f"/event-types/{name}/schemas", params={"offset": offset, "limit": limit})
        assert page.status_code == 200
        assert page.json() == {"_links": {}, "items": []}
    last = client.get(f"/event-types/{name}/schemas", params={"offset": 1, "limit": 1}).json()
    assert last["_links"] == {}


def test_a_name_over_255_characters_says_its_length(client: httpx.Client) -> None:
    """EventTypeAT.rejectTooLongEventTypeNames, with its event-type.with.too-long-name.json."""
    name = "-".join(["1234567890"] * 26)
    response = client.post(
        "/event-types",
        json={
            "name": name,
            "owning_application": "article-producer",
            "category": "data",
            "schema": {"type": "json_schema", "schema": json.dumps({"type": "object"})},
        },
    )
    detail = assert_problem(response, 422)
    assert "the length of the name must be >= 1 and <= 255" in detail
    assert "does not match" in detail


def test_an_event_type_with_subscriptions_is_not_deleted(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """SubscriptionAT.testDeleteEventTypeRestriction: 409 while it has subscriptions (the
    feature delete_event_type_with_subscriptions is off, Nakadi's default)."""
    name = make_event_type()
    sid = create(client, [name])["id"]
    detail = assert_problem(client.delete(f"/event-types/{name}"), 409)
    assert detail == f"Can't remove event type {name}, as it has subscriptions"
    assert client.get(f"/event-types/{name}").status_code == 200
    assert client.get(f"/subscriptions/{sid}").status_code == 200


def test_subscriptions_of_nakadis_archiver_do_not_keep_an_event_type(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """SubscriptionAT.testDeleteEventTypeRestrictionDeletable, with Nakadi's default deletable
    owning application and consumer group."""
    name = make_event_type()
    archived = create(
        client, [name], owning_application="nakadi_archiver", consumer_group="nakadi_to_s3"
    )
    assert client.delete(f"/event-types/{name}").status_code == 200
    assert_problem(client.get(f"/event-types/{name}"), 404)
    assert_problem(client.get(f"/subscriptions/{archived['id']}"), 404)


def test_the_deletable_subscriptions_are_a_setting(
    broker_dsn: str, kafka_bootstrap: str, unique_name, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nakadi's nakadi.eventType.deletableSubscription, as flags or their environment."""
    monkeypatch.setenv("CHANGEBROKER_BROKER_DELETABLE_SUBSCRIPTION_OWNING_APPLICATION", "archiver")
    parser = argparse.ArgumentParser()
    main.configure(parser)
    args = parser.parse_args(
        ["--pg-url", broker_dsn, "--deletable-subscription-consumer-group", "to-s3"]
    )
    settings = config.from_args(
        Settings, args, pg_dsn=broker_dsn, kafka_bootstrap=kafka_bootstrap, auth=AuthSettings()
    )
    assert settings.deletable_subscription_owning_application == "archiver"
    assert settings.deletable_subscription_consumer_group == "to-s3"
    with (
        serve_in_thread(create_app(settings)) as url,
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        kept, gone = unique_name("kept"), unique_name("gone")
        for name in (kept, gone):
            assert http.post("/event-types", json=business_event_type(name)).status_code == 201
        create(http, [kept], owning_application="nakadi_archiver", consumer_group="nakadi_to_s3")
        assert_problem(http.delete(f"/event-types/{kept}"), 409)
        create(http, [gone], owning_application="archiver", consumer_group="to-s3")
        assert http.delete(f"/event-types/{gone}").status_code == 200
