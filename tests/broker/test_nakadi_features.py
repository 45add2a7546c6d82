"""``/settings/features`` as Nakadi answers it, and what its features do: each test sends the
request of Nakadi's own acceptance test (zalando/nakadi ``acceptance-test/``, named per test)
and expects its answer. Authentication is off, as Nakadi's acceptance tests run."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from changebroker import pg
from changebroker.broker.app import create_app
from changebroker.broker.settings import Settings
from changebroker.stack.run import serve_in_thread
from tests.broker.stream_support import order, publish
from tests.broker.subscription_support import Stream, create
from tests.broker.swagger import assert_problem
from tests.support.event_types import business_event_type

# The broker's migrations before feature names were lower-case (sql/broker/008).
FEATURES_UPPER_CASE_UNTIL = 7
NAKADIS_HONOURED = [
    "disable_event_type_creation",
    "disable_event_type_deletion",
    "delete_event_type_with_subscriptions",
    "disable_subscription_creation",
    "disable_db_write_operations",
]


def switch(client: httpx.Client, feature: str, enabled: bool) -> None:
    response = client.post("/settings/features", json={"feature": feature, "enabled": enabled})
    assert response.status_code == 204, response.text


def features(client: httpx.Client) -> dict[str, bool]:
    response = client.get("/settings/features")
    assert response.status_code == 200
    return {item["feature"]: item["enabled"] for item in response.json()["items"]}


def test_features_are_named_in_any_case_and_written_lower_case(client: httpx.Client) -> None:
    assert list(features(client)) == NAKADIS_HONOURED
    switch(client, "DISABLE_SUBSCRIPTION_CREATION", True)
    assert features(client)["disable_subscription_creation"] is True
    # Nakadi reads "enabled" as a Java boolean: absent, it is false.
    response = client.post("/settings/features", json={"feature": "Disable_Subscription_Creation"})
    assert response.status_code == 204, response.text
    assert features(client)["disable_subscription_creation"] is False


def test_an_unreadable_feature_switch_is_400(client: httpx.Client) -> None:
    """SettingsControllerAT.testInvalidFeatureToggle: a misspelt field leaves no feature."""
    misspelt = client.post(
        "/settings/features", json={"feeeeeeeature": "kpi_collection", "enabled": False}
    )
    assert_problem(misspelt, 400, '"feature" is required')
    unknown = client.post("/settings/features", json={"feature": "kpi_colection", "enabled": True})
    assert_problem(unknown, 400, "Illegal enum value: 'kpi_colection'. Possible values: [")
    assert_problem(
        client.post(
            "/settings/features", json={"feature": "disable_db_write_operations", "enabled": "yes"}
        ),
        400,
        '"enabled"',
    )
    assert not any(features(client).values())


def test_db_write_operations_disabled_then_metadata_writes_are_503(
    client: httpx.Client, make_event_type: Callable[..., str], unique_name
) -> None:
    """FeatureFlagsAT.whenDbWriteOperationsInactiveThen503s, and every other metadata write
    Nakadi's flag blocks; events still flow."""
    name = make_event_type()
    sid = create(client, [name], consumer_group="existing")["id"]
    switch(client, "disable_db_write_operations", True)
    try:
        read_only = "Database is currently in read-only mode"
        new = business_event_type(unique_name("refused"))
        assert assert_problem(client.post("/event-types", json=new), 503) == read_only
        current = client.get(f"/event-types/{name}").json()
        changed = {**current, "owning_application": "other"}
        assert assert_problem(client.put(f"/event-types/{name}", json=changed), 503) == read_only
        assert assert_problem(client.delete(f"/event-types/{name}"), 503) == read_only
        fresh = {"owning_application": "order-service", "event_types": [name]}
        assert assert_problem(client.post("/subscriptions", json=fresh), 503) == read_only
        # The subscription a client creates again at each start is still answered.
        again = client.post("/subscriptions", json={**fresh, "consumer_group": "existing"})
        assert again.status_code == 200, again.text
        assert again.json()["id"] == sid
        assert assert_problem(client.delete(f"/subscriptions/{sid}"), 503) == read_only
        admins = {"data_type": "user", "value": "ops"}
        body = {"admins": [admins], "readers": [admins], "writers": [admins]}
        assert assert_problem(client.post("/settings/admins", json=body), 503) == read_only
        publish(client, name, [order("1")])
        assert client.get(f"/event-types/{new['name']}").status_code == 404
        assert client.get(f"/event-types/{name}").json() == current
    finally:
        switch(client, "disable_db_write_operations", False)
    assert client.post("/event-types", json=new).status_code == 201


def test_creation_features_apply_to_everyone_and_keep_existing_subscriptions(
    client: httpx.Client, make_event_type: Callable[..., str], unique_name
) -> None:
    """Nakadi's EventTypeController and PostSubscriptionController: 501 and 503 in their words,
    and an existing subscription is still answered."""
    name = make_event_type()
    sid = create(client, [name], consumer_group="before")["id"]
    switch(client, "disable_event_type_creation", True)
    switch(client, "disable_subscription_creation", True)
    try:
        refused = client.post("/event-types", json=business_event_type(unique_name("off")))
        assert assert_problem(refused, 501) == "Event Type creation is disabled"
        body = {"owning_application": "order-service", "event_types": [name]}
        fresh = client.post("/subscriptions", json={**body, "consumer_group": "after"})
        assert assert_problem(fresh, 503) == "Subscription creation is temporarily unavailable"
        existing = client.post("/subscriptions", json={**body, "consumer_group": "before"})
        assert existing.status_code == 200
        assert existing.json()["id"] == sid
    finally:
        switch(client, "disable_event_type_creation", False)
        switch(client, "disable_subscription_creation", False)


def test_delete_event_type_with_subscriptions(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """SubscriptionAT.testDeleteEventTypeRestrictionFeatureToggle: with the feature on, the
    event type goes and its subscriptions with it; their open streams end."""
    name, other = make_event_type(), make_event_type()
    alone = create(client, [name])["id"]
    shared = create(client, [name, other])["id"]
    # Keep-alives every 0.2 s; the stream would time out only after a minute.
    stream = Stream(client, alone, batch_flush_timeout=0.2, stream_timeout=60)
    assert stream.status_code == 200
    switch(client, "delete_event_type_with_subscriptions", True)
    try:
        assert client.delete(f"/event-types/{name}").status_code == 200
    finally:
        switch(client, "delete_event_type_with_subscriptions", False)
    deleted = time.monotonic()
    assert_problem(client.get(f"/event-types/{name}"), 404)
    assert_problem(client.get(f"/subscriptions/{alone}"), 404)
    assert_problem(client.get(f"/subscriptions/{shared}"), 404)
    stream.until_end()
    assert time.monotonic() - deleted < 30, "the stream ran on to its stream_timeout"
    assert client.get(f"/event-types/{other}").status_code == 200


def test_features_stored_upper_case_by_an_earlier_broker_are_read_lower_case(
    pg_server_dsn: str, kafka_bootstrap: str
) -> None:
    with pg.scratch_database(pg_server_dsn, "t_features") as dsn:
        pg.migrate(dsn, "registry")
        pg.migrate(dsn, "broker", until=FEATURES_UPPER_CASE_UNTIL)
        with pg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO broker_features (feature, enabled)"
                " VALUES ('DISABLE_SUBSCRIPTION_CREATION', true)"
            )
        settings = Settings(pg_dsn=dsn, kafka_bootstrap=kafka_bootstrap)
        with (
            serve_in_thread(create_app(settings)) as url,
            httpx.Client(base_url=url, timeout=60) as http,
        ):
            assert features(http)["disable_subscription_creation"] is True
            switch(http, "disable_subscription_creation", False)
            assert features(http)["disable_subscription_creation"] is False
        with pg.connect(dsn) as conn:
            rows = conn.execute("SELECT feature, enabled FROM broker_features").fetchall()
        assert rows == [("disable_subscription_creation", False)]
