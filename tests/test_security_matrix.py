"""Every kind of bad or insufficient credential against every operation that changes or reads
data, on the broker, the registry and the changeserver with JWT authentication: the status each
answers, and nothing changed in Postgres, Kafka or the registry by a refused request."""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition

from broker.app import create_app as broker_app
from broker.settings import Settings as BrokerSettings
from changebroker import kafka, pg
from changebroker.auth import AuthSettings
from changebroker.stack.processes import wait_until
from changebroker.stack.run import serve_in_thread
from changeserver.server import ChangeServer
from changeserver.server import Settings as ChangeServerSettings
from registry.app import create_app as registry_app
from tests.support.credentials import Issuer
from tests.support.event_types import business_event_type

NAKADI = [
    "nakadi.config.write",
    "nakadi.event_type.write",
    "nakadi.event_stream.write",
    "nakadi.event_stream.read",
]
EVERY_SCOPE = [*NAKADI, "registry.read", "registry.write", "changeserver.read"]
OWNERS = ("shop", "blocked-app")  # the event types' and subscriptions' own applications


@dataclass
class World:
    issuer: Issuer
    broker: httpx.Client
    registry: httpx.Client
    changeserver: httpx.Client
    dsn: str
    bootstrap: str

    def token(self, sub: str, scopes: list[str] = EVERY_SCOPE, **claims: Any) -> str:
        return self.issuer.token(sub, scopes, **claims)

    def as_admin(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token('ops')}"}


@pytest.fixture(scope="module")
def world(
    pg_server_dsn: str, pg_dsn_module: str, kafka_bootstrap: str, tmp_path_factory
) -> Iterator[World]:
    issuer = Issuer()
    jwks = issuer.write_jwks(tmp_path_factory.mktemp("jwks") / "jwks.json")
    auth = AuthSettings(
        mode="jwt", jwks=str(jwks), audience="changebroker", issuer="https://issuer.test"
    )
    auth_with_admins = dataclasses.replace(auth, admins=("ops",))
    with contextlib.ExitStack() as stack:
        meta = stack.enter_context(pg.scratch_database(pg_server_dsn, "t_matrix"))
        settings = BrokerSettings(
            pg_dsn=meta, kafka_bootstrap=kafka_bootstrap, auth=auth_with_admins
        )
        broker_url = stack.enter_context(serve_in_thread(broker_app(settings)))
        # The registry on the broker's database, as `up` runs them: event type schemas too.
        registry_url = stack.enter_context(
            serve_in_thread(registry_app(meta, authenticator=auth.authenticator()))
        )
        slot = f"matrix_{uuid.uuid4().hex[:8]}"
        changeserver = ChangeServer(
            ChangeServerSettings(
                dsn=pg_dsn_module, slot=slot, db_dir=tmp_path_factory.mktemp("changelog")
            ),
            authenticator=auth.authenticator(),
        )
        changes_url = stack.enter_context(serve_in_thread(changeserver.api_app))
        wait_until(changeserver.replicator.streaming.is_set, timeout=30, what="replication")
        broker, registry, changes = (
            stack.enter_context(httpx.Client(base_url=url, timeout=60))
            for url in (broker_url, registry_url, changes_url)
        )
        world = World(issuer, broker, registry, changes, meta, kafka_bootstrap)
        for kind in ("PRODUCER_APP", "CONSUMER_APP"):
            blocked = world.broker.put(
                f"/settings/blacklist/{kind}/blocked-app", headers=world.as_admin()
            )
            assert blocked.status_code == 204, blocked.text
        # Each cell's event type has a subscription, which keeps it from being deleted unless
        # this feature lets the subscription go with it: the matrix asks who may delete.
        with_subscriptions = {"feature": "delete_event_type_with_subscriptions", "enabled": True}
        switched = world.broker.post(
            "/settings/features", json=with_subscriptions, headers=world.as_admin()
        )
        assert switched.status_code == 204, switched.text
        yield world


@pytest.fixture(scope="module")
def pg_dsn_module(pg_server_dsn: str) -> Iterator[str]:
    """The application database the changeserver serves (its slot dropped with it)."""
    with pg.scratch_database(pg_server_dsn, "t_matrix_app") as dsn:
        yield dsn
        with psycopg.connect(dsn, autocommit=True) as conn:
            for (slot,) in conn.execute(
                "SELECT slot_name FROM pg_replication_slots WHERE database = current_database()"
            ).fetchall():
                wait_until(_dropped(conn, slot), timeout=30, what=f"slot {slot} dropped")


def _dropped(conn: psycopg.Connection, slot: str) -> Callable[[], bool]:
    """Drops the slot once the stopped changeserver's connection has let go of it."""

    def attempt() -> bool:
        try:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        except psycopg.errors.ObjectInUse:
            return False
        return True

    return attempt


@dataclass
class Resources:
    """One cell's own event type and subscription, owned by the OWNERS."""

    event_type: str
    subscription: str
    topic: str


def order(number: str) -> dict[str, Any]:
    metadata = {"eid": str(uuid.uuid4()), "occurred_at": "2026-11-23T17:00:00Z"}
    return {"order_number": number, "metadata": metadata}


def _owners() -> list[dict[str, str]]:
    return [{"data_type": "service", "value": owner} for owner in OWNERS]


@pytest.fixture
def resources(world: World, unique_name: Callable[[str], str]) -> Resources:
    name = unique_name("matrix")
    owners = _owners()
    body = business_event_type(
        name, authorization={"admins": owners, "readers": owners, "writers": owners}
    )
    created = world.broker.post("/event-types", json=body, headers=world.as_admin())
    assert created.status_code == 201, created.text
    published = world.broker.post(
        f"/event-types/{name}/events", json=[order("1")], headers=world.as_admin()
    )
    assert published.status_code == 200, published.text
    subscription = world.broker.post(
        "/subscriptions",
        json={
            "owning_application": "shop",
            "event_types": [name],
            "consumer_group": name,
            "read_from": "begin",
            "authorization": {"admins": owners, "readers": owners},
        },
        headers=world.as_admin(),
    )
    assert subscription.status_code == 201, subscription.text
    schema = {"serialization": "json", "schemaDefinition": {"type": "object"}}
    registered = world.registry.post(
        f"/subjects/{name}-value/versions", json=schema, headers=world.as_admin()
    )
    assert registered.status_code == 200, registered.text
    with psycopg.connect(world.dsn) as conn:
        row = conn.execute("SELECT topic FROM broker_event_types WHERE name = %s", (name,))
        (topic,) = row.fetchone()  # type: ignore[misc]
    return Resources(name, subscription.json()["id"], topic)


# -- credentials --------------------------------------------------------------------------

CREDENTIALS = [
    "no token",
    "bad signature",
    "expired",
    "wrong audience",
    "missing scope",
    "another team",
    "blacklisted application",
    "blacklisted event type",
]


def headers_for(credential: str, world: World, resources: Resources) -> dict[str, str]:
    token = {
        "no token": None,
        "bad signature": Issuer().token("shop", EVERY_SCOPE),  # the right kid, another key
        "expired": world.token("shop", lifetime=-3600),
        "wrong audience": world.token("shop", aud="another-service"),
        "missing scope": world.token("shop", []),
        "another team": world.token("intruder"),
        "blacklisted application": world.token("blocked-app"),
        "blacklisted event type": world.token("shop"),
    }[credential]
    if credential == "blacklisted event type":
        for kind in ("PRODUCER_ET", "CONSUMER_ET"):
            path = f"/settings/blacklist/{kind}/{resources.event_type}"
            assert world.broker.put(path, headers=world.as_admin()).status_code == 204
    return {"authorization": f"Bearer {token}"} if token else {}


# -- operations ---------------------------------------------------------------------------

Operation = Callable[[World, Resources, dict[str, str]], httpx.Response]


def publish(w: World, r: Resources, h: dict[str, str]) -> httpx.Response:
    return w.broker.post(
        f"/event-types/{r.event_type}/events", json=[{"order_number": "2"}], headers=h
    )


def low_level_stream(w: World, r: Resources, h: dict[str, str]) -> httpx.Response:
    params = {"stream_limit": 1, "stream_timeout": 1}
    return w.broker.get(f"/event-types/{r.event_type}/events", params=params, headers=h)


def subscription_stream(w: World, r: Resources, h: dict[str, str]) -> httpx.Response:
    params = {"stream_limit": 1, "stream_timeout": 1}
    return w.broker.get(f"/subscriptions/{r.subscription}/events", params=params, headers=h)


def commit(w: World, r: Resources, h: dict[str, str]) -> httpx.Response:
    cursor = {
        "event_type": r.event_type,
        "partition": "0",
        "offset": "001-0001-000000000000000000",
        "cursor_token": str(uuid.uuid4()),
    }
    headers = {**h, "X-Nakadi-StreamId": str(uuid.uuid4())}
    return w.broker.post(
        f"/subscriptions/{r.subscription}/cursors", json={"items": [cursor]}, headers=headers
    )


def cursor_reset(w: World, r: Resources, h: dict[str, str]) -> httpx.Response:
    cursor = {"event_type": r.event_type, "partition": "0", "offset": "BEGIN"}
    return w.broker.patch(
        f"/subscriptions/{r.subscription}/cursors", json={"items": [cursor]}, headers=h
    )


def event_type_update(w: World, r: Resources, h: dict[str, str]) -> httpx.Response:
    owners = _owners()
    body = business_event_type(
        r.event_type, authorization={"admins": owners, "readers": owners, "writers": owners}
    )
    return w.broker.put(f"/event-types/{r.event_type}", json=body, headers=h)


def event_type_delete(w: World, r: Resources, h: dict[str, str]) -> httpx.Response:
    return w.broker.delete(f"/event-types/{r.event_type}", headers=h)


def registry_register(w: World, r: Resources, h: dict[str, str]) -> httpx.Response:
    schema = {"serialization": "json", "schemaDefinition": {"type": "object"}}
    return w.registry.post(f"/subjects/{r.event_type}-value/versions", json=schema, headers=h)


def registry_config(w: World, r: Resources, h: dict[str, str]) -> httpx.Response:
    return w.registry.put(
        f"/config/{r.event_type}-value", json={"compatibility": "NONE"}, headers=h
    )


def changes(w: World, r: Resources, h: dict[str, str]) -> httpx.Response:
    return w.changeserver.get("/changes", params={"scope": "matrix"}, headers=h)


OPERATIONS: dict[str, Operation] = {
    "publish": publish,
    "low-level stream": low_level_stream,
    "subscription stream": subscription_stream,
    "commit": commit,
    "cursor reset": cursor_reset,
    "event type update": event_type_update,
    "event type delete": event_type_delete,
    "registry register": registry_register,
    "registry config": registry_config,
    "changeserver /changes": changes,
}
REGISTRY_AND_CHANGESERVER = {"registry register", "registry config", "changeserver /changes"}
# Administering an event type is not consumption or production: the blacklist does not refuse
# it. (A cursor reset is: Nakadi refuses a blocked consumer's reset as its commits.)
ADMINISTRATION = {"event type update", "event type delete"}


def expected(credential: str, operation: str) -> int:
    if credential in ("no token", "bad signature", "expired", "wrong audience"):
        return 401
    if credential == "missing scope":
        return 403
    if operation in REGISTRY_AND_CHANGESERVER:
        # The registry and the changeserver authorize by scope only: a valid token with them
        # may read changes and register schemas, whoever owns the broker's event types.
        return 200
    if credential == "another team":
        return 403
    if operation in ADMINISTRATION:  # the blacklisted ones are the resources' own admins
        return 200
    return 403


# -- what must not change -----------------------------------------------------------------


def state(world: World, resources: Resources) -> dict[str, Any]:
    """The stored state a refused request must leave as it was."""
    tables = [
        "broker_event_types",
        "broker_subscriptions",
        "broker_subscription_partitions",
        "broker_subscription_sessions",
        "broker_schema_versions",
        "registry_subjects",
        "registry_schemas",
    ]
    with psycopg.connect(world.dsn) as conn:
        rows = {
            table: conn.execute(
                f"SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), ''))"
                f" FROM {table} t"
            ).fetchone()
            for table in tables
        }
    consumer = Consumer(kafka.client_config(world.bootstrap, **{"group.id": "matrix-probe"}))
    try:
        marks = consumer.get_watermark_offsets(TopicPartition(resources.topic, 0), timeout=10)
    finally:
        consumer.close()
    return {**rows, "kafka": marks}


CELLS = [(c, o) for c in CREDENTIALS for o in OPERATIONS]


@pytest.mark.parametrize(("credential", "operation"), CELLS, ids=[f"{c}-{o}" for c, o in CELLS])
def test_matrix(world: World, resources: Resources, credential: str, operation: str) -> None:
    headers = headers_for(credential, world, resources)
    before = state(world, resources)
    response = OPERATIONS[operation](world, resources, headers)
    want = expected(credential, operation)
    assert response.status_code == want, response.text
    if want in (401, 403):
        assert state(world, resources) == before
        # Each service answers in its own error format.
        body = response.json()
        if operation.startswith("registry"):
            assert body["errorCode"] == {401: 40101, 403: 40301}[want]
        elif operation == "changeserver /changes":
            assert body["code"] == {401: "UNAUTHORIZED", 403: "FORBIDDEN"}[want]
        else:
            assert response.headers["content-type"] == "application/problem+json"
            assert body["status"] == want
