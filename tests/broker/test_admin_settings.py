"""With authentication on: scopes per endpoint, and /settings (admins, blacklist, features)
kept in Postgres and seen by every broker process."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator

import httpx
import pytest

from changebroker import pg
from changebroker.auth import AuthSettings, add_options
from changebroker.broker.admin_settings import REFRESH
from changebroker.broker.app import create_app
from changebroker.broker.settings import Settings
from changebroker.stack.processes import wait_until
from changebroker.stack.run import serve_in_thread
from tests.support.credentials import tokens_file
from tests.support.event_types import business_event_type

ALL_SCOPES = [
    "nakadi.config.write",
    "nakadi.event_type.write",
    "nakadi.event_stream.write",
    "nakadi.event_stream.read",
]


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def secured_settings(
    broker_dsn: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    tokens = tokens_file(
        tmp_path_factory.mktemp("auth") / "tokens.json",
        {
            "ops": ("ops", ALL_SCOPES),
            "shop": ("shop", ALL_SCOPES),
            "bare": ("nobody", []),
        },
    )
    auth = AuthSettings(mode="tokens", tokens_file=tokens, admins=("ops",))
    return Settings(pg_dsn=broker_dsn, kafka_bootstrap=kafka_bootstrap, auth=auth)


@pytest.fixture(scope="module")
def secured(secured_settings: Settings) -> Iterator[httpx.Client]:
    with (
        serve_in_thread(create_app(secured_settings)) as url,
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        yield http


def problem(response: httpx.Response, status: int) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, object] = response.json()
    assert body["status"] == status
    return body


def test_health_is_open_everything_else_needs_a_token(secured: httpx.Client) -> None:
    assert secured.get("/health").status_code == 200
    refused = secured.get("/event-types")
    problem(refused, 401)
    assert refused.headers["www-authenticate"] == "Bearer"
    problem(secured.get("/event-types", headers=bearer("forged")), 401)
    assert secured.get("/event-types", headers=bearer("bare")).status_code == 200


def test_scopes_per_endpoint_and_nothing_written_when_refused(
    secured: httpx.Client, unique_name
) -> None:
    name = unique_name("scoped")
    body = business_event_type(name)
    detail = problem(secured.post("/event-types", json=body, headers=bearer("bare")), 403)
    assert "nakadi.event_type.write" in str(detail["detail"])
    problem(secured.get(f"/event-types/{name}", headers=bearer("bare")), 404)
    assert secured.post("/event-types", json=body, headers=bearer("shop")).status_code == 201
    partitions = f"/event-types/{name}/partitions"
    before = secured.get(partitions, headers=bearer("shop")).json()
    event = [{"order_number": "1"}]
    problem(secured.post(f"/event-types/{name}/events", json=event, headers=bearer("bare")), 403)
    problem(secured.get(f"/event-types/{name}/partitions", headers=bearer("bare")), 403)
    problem(secured.delete(f"/event-types/{name}", headers=bearer("bare")), 403)
    assert secured.get(partitions, headers=bearer("shop")).json() == before
    assert secured.get(f"/event-types/{name}", headers=bearer("bare")).status_code == 200


def test_admins_read_and_change_the_administrators(secured: httpx.Client) -> None:
    problem(secured.get("/settings/admins", headers=bearer("shop")), 403)
    initial = secured.get("/settings/admins", headers=bearer("ops"))
    assert initial.status_code == 200
    ops = {"data_type": "*", "value": "ops"}
    assert initial.json() == {"admins": [ops], "readers": [ops], "writers": [ops]}

    too_few = {"admins": [], "readers": [ops], "writers": [ops]}
    problem(secured.post("/settings/admins", json=too_few, headers=bearer("ops")), 422)
    shop = {"data_type": "service", "value": "shop"}
    wider = {"admins": [ops], "readers": [ops, shop], "writers": [ops]}
    problem(secured.post("/settings/admins", json=wider, headers=bearer("shop")), 403)
    assert secured.post("/settings/admins", json=wider, headers=bearer("ops")).json() == wider
    # shop reads the settings now, but changes neither them nor the blacklist.
    assert secured.get("/settings/admins", headers=bearer("shop")).json() == wider
    problem(secured.put("/settings/blacklist/CONSUMER_APP/x", headers=bearer("shop")), 403)


def test_blacklist_and_features_are_shared_through_postgres(
    secured: httpx.Client, secured_settings: Settings
) -> None:
    ops = bearer("ops")
    assert secured.put("/settings/blacklist/PRODUCER_APP/spammer", headers=ops).status_code == 204
    assert secured.put("/settings/blacklist/CONSUMER_ET/secret", headers=ops).status_code == 204
    problem(secured.put("/settings/blacklist/SOMETHING/x", headers=ops), 422)
    feature = {"feature": "disable_subscription_creation", "enabled": True}
    assert secured.post("/settings/features", json=feature, headers=ops).status_code == 204
    problem(secured.post("/settings/features", json={"feature": "X"}, headers=ops), 400)

    # Another broker process on the same database sees the same settings.
    with (
        serve_in_thread(create_app(secured_settings)) as other_url,
        httpx.Client(base_url=other_url, timeout=60) as other,
    ):
        assert other.get("/settings/blacklist", headers=ops).json() == {
            "producers": {"apps": ["spammer"], "event_types": []},
            "consumers": {"apps": [], "event_types": ["secret"]},
        }
        features = other.get("/settings/features", headers=ops).json()["items"]
        assert {"feature": "disable_subscription_creation", "enabled": True} in features
        assert {"feature": "disable_event_type_creation", "enabled": False} in features
        unblock = "/settings/blacklist/PRODUCER_APP/spammer"
        assert other.delete(unblock, headers=ops).status_code == 204

    # ... and this process within REFRESH (a second) of the other's change.
    def unblocked() -> bool:
        blacklist = secured.get("/settings/blacklist", headers=ops).json()
        return blacklist["producers"]["apps"] == []

    wait_until(unblocked, timeout=2 * REFRESH + 5, what="the other process's unblocking")
    feature["enabled"] = False
    assert secured.post("/settings/features", json=feature, headers=ops).status_code == 204


def test_event_type_deletion_disabled_leaves_it_to_the_administrators(
    secured: httpx.Client, unique_name
) -> None:
    """Nakadi's EventTypeController: with disable_event_type_deletion on, 403 "Event Type
    deletion is disabled" for all but the administrators."""
    ops, shop = bearer("ops"), bearer("shop")
    name = unique_name("undeletable")
    assert (
        secured.post("/event-types", json=business_event_type(name), headers=shop).status_code
        == 201
    )
    switch = {"feature": "disable_event_type_deletion", "enabled": True}
    assert secured.post("/settings/features", json=switch, headers=ops).status_code == 204
    try:
        refused = problem(secured.delete(f"/event-types/{name}", headers=shop), 403)
        assert refused["detail"] == "Event Type deletion is disabled"
        assert secured.get(f"/event-types/{name}", headers=shop).status_code == 200
        assert secured.delete(f"/event-types/{name}", headers=ops).status_code == 200
    finally:
        switch["enabled"] = False
        assert secured.post("/settings/features", json=switch, headers=ops).status_code == 204


def test_admins_name_a_data_type_or_else_any(
    pg_server_dsn: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``--admins service:ops,alice``: the service ops administers, a user ops does not; the
    bare alice is alice under any data type, as the flag always meant."""
    tokens = tmp_path_factory.mktemp("admins") / "tokens.json"
    callers = {
        "ops-service": ("ops", "service"),
        "ops-user": ("ops", "user"),
        "alice-user": ("alice", "user"),
        "alice-service": ("alice", "service"),
    }
    tokens.write_text(
        json.dumps(
            {
                token: {"sub": sub, "type": kind, "scopes": ALL_SCOPES}
                for token, (sub, kind) in callers.items()
            }
        )
    )
    parser = argparse.ArgumentParser()
    add_options(parser)
    flags = ["--auth", "tokens", "--auth-tokens", str(tokens), "--admins", "service:ops, alice"]
    auth = AuthSettings.from_args(parser.parse_args(flags))
    with (
        # A database of its own: /settings/admins not set yet, so --admins decides.
        pg.scratch_database(pg_server_dsn, "t_admins") as dsn,
        serve_in_thread(
            create_app(Settings(pg_dsn=dsn, kafka_bootstrap=kafka_bootstrap, auth=auth))
        ) as url,
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        answers = {token: http.get("/settings/admins", headers=bearer(token)) for token in callers}
    assert {token: answer.status_code for token, answer in answers.items()} == {
        "ops-service": 200,
        "ops-user": 403,
        "alice-user": 200,
        "alice-service": 200,
    }
    assert answers["ops-service"].json()["admins"] == [
        {"data_type": "service", "value": "ops"},
        {"data_type": "*", "value": "alice"},
    ]


@pytest.mark.parametrize("entry", [":ops", "service:", "ops,:x"])
def test_an_admin_that_names_no_caller_is_refused_at_start(entry: str) -> None:
    parser = argparse.ArgumentParser()
    add_options(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--admins", entry])
