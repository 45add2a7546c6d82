"""Every kind of bad or insufficient credential against every operation that changes or reads
data, on the broker, the registry and the changeserver with JWT authentication: the status each
answers, and nothing changed in Postgres, Kafka or the registry by a refused request. And every
route of every service (those, the bridge and the console) against its scope table: named by a
rule, HEAD asked for what GET is asked for, anything unnamed for the strictest scope."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import psycopg
import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp

from changebroker import kafka, pg
from changebroker.auth import AuthMiddleware, AuthSettings
from changebroker.bridge.bridge import Bridge
from changebroker.bridge.main import create_app as bridge_app
from changebroker.bridge.settings import Settings as BridgeSettings
from changebroker.broker.app import STREAMS
from changebroker.broker.app import create_app as broker_app
from changebroker.broker.authorization import Scopes
from changebroker.broker.settings import Settings as BrokerSettings
from changebroker.changeserver.server import ChangeServer
from changebroker.changeserver.server import Settings as ChangeServerSettings
from changebroker.console.app import create_app as console_app
from changebroker.console.upstream import Endpoints
from changebroker.registry.app import create_app as registry_app
from changebroker.stack.processes import wait_until
from changebroker.stack.run import serve_in_thread
from tests.support import REPO_ROOT
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
    # Every service as served (the app, its client): broker, registry, changeserver, bridge,
    # console.
    services: dict[str, tuple[ASGIApp, httpx.Client]] = dataclasses.field(default_factory=dict)

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
        apps: dict[str, ASGIApp] = {"broker": broker_app(settings)}
        broker_url = stack.enter_context(serve_in_thread(apps["broker"]))
        # The registry on the broker's database, as `up` runs them: event type schemas too.
        apps["registry"] = registry_app(meta, authenticator=auth.authenticator())
        registry_url = stack.enter_context(serve_in_thread(apps["registry"]))
        slot = f"matrix_{uuid.uuid4().hex[:8]}"
        changeserver = ChangeServer(
            ChangeServerSettings(
                dsn=pg_dsn_module, slot=slot, db_dir=tmp_path_factory.mktemp("changelog")
            ),
            authenticator=auth.authenticator(),
        )
        apps["changeserver"] = changeserver.api_app
        changes_url = stack.enter_context(serve_in_thread(changeserver.api_app))
        wait_until(changeserver.replicator.streaming.is_set, timeout=30, what="replication")
        bridge = Bridge(
            BridgeSettings(
                changeserver_url=changes_url,
                broker_url=broker_url,
                meta_dsn=meta,
                app_dsn=pg_dsn_module,
                kafka_bootstrap=kafka_bootstrap,
                name=slot,
                prefix=slot,
                publication=slot,
                client_token=issuer.token("matrix-bridge", EVERY_SCOPE, lifetime=3600),
            )
        )
        apps["bridge"] = bridge_app(bridge, auth.authenticator())
        bridge_url = stack.enter_context(serve_in_thread(apps["bridge"]))
        endpoints = Endpoints(broker_url, registry_url, changes_url, changes_url, bridge_url)
        apps["console"] = console_app(endpoints, authenticator=auth.authenticator())
        console_url = stack.enter_context(serve_in_thread(apps["console"]))
        urls = {
            "broker": broker_url,
            "registry": registry_url,
            "changeserver": changes_url,
            "bridge": bridge_url,
            "console": console_url,
        }
        clients = {
            name: stack.enter_context(httpx.Client(base_url=url, timeout=60))
            for name, url in urls.items()
        }
        world = World(
            issuer,
            clients["broker"],
            clients["registry"],
            clients["changeserver"],
            meta,
            kafka_bootstrap,
            {name: (apps[name], clients[name]) for name in apps},
        )
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
    """One cell's own event type and subscription, owned by the OWNERS, and a registry subject
    beside it (``<event type>-value``) with one schema."""

    event_type: str
    subscription: str
    topic: str
    schema_id: str


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
    return Resources(name, subscription.json()["id"], topic, str(registered.json()["id"]))


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


def low_level_stream(
    w: World, r: Resources, h: dict[str, str], method: str = "GET"
) -> httpx.Response:
    params = {"stream_limit": 1, "stream_timeout": 1}
    path = f"/event-types/{r.event_type}/events"
    return w.broker.request(method, path, params=params, headers=h)


def subscription_stream(
    w: World, r: Resources, h: dict[str, str], method: str = "GET"
) -> httpx.Response:
    params = {"stream_limit": 1, "stream_timeout": 1}
    path = f"/subscriptions/{r.subscription}/events"
    return w.broker.request(method, path, params=params, headers=h)


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


def changes(w: World, r: Resources, h: dict[str, str], method: str = "GET") -> httpx.Response:
    return w.changeserver.request(method, "/changes", params={"scope": "matrix"}, headers=h)


def head(operation: Callable[..., httpx.Response]) -> Operation:
    """The GET ``operation`` as a HEAD, which asks for what GET asks for."""
    return lambda w, r, h: operation(w, r, h, "HEAD")


OPERATIONS: dict[str, Operation] = {
    "publish": publish,
    "low-level stream": low_level_stream,
    "low-level stream HEAD": head(low_level_stream),
    "subscription stream": subscription_stream,
    "subscription stream HEAD": head(subscription_stream),
    "commit": commit,
    "cursor reset": cursor_reset,
    "event type update": event_type_update,
    "event type delete": event_type_delete,
    "registry register": registry_register,
    "registry config": registry_config,
    "changeserver /changes": changes,
    "changeserver /changes HEAD": head(changes),
}
REGISTRY_AND_CHANGESERVER = {
    "registry register",
    "registry config",
    "changeserver /changes",
    "changeserver /changes HEAD",
}
# A HEAD of a stream opens none (no Kafka consumer, no subscription session): 405.
STREAM_HEADS = {"low-level stream HEAD", "subscription stream HEAD"}
# Administering an event type is not consumption or production: the blacklist does not refuse
# it. (A cursor reset is: Nakadi refuses a blocked consumer's reset as its commits.)
ADMINISTRATION = {"event type update", "event type delete"}


def expected(credential: str, operation: str) -> int:
    if credential in ("no token", "bad signature", "expired", "wrong audience"):
        return 401
    if credential == "missing scope":
        return 403
    if operation in STREAM_HEADS:
        return 405
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
    if want in (401, 403, 405):
        assert state(world, resources) == before
    if want in (401, 403) and response.request.method == "HEAD":
        # No body: the refusal is in the service's own format by its media type.
        media = "application/problem+json" if "stream" in operation else "application/json"
        assert response.headers["content-type"] == media
    elif want in (401, 403):
        # Each service answers in its own error format.
        body = response.json()
        if operation.startswith("registry"):
            assert body["errorCode"] == {401: 40101, 403: 40301}[want]
        elif operation == "changeserver /changes":
            assert body["code"] == {401: "UNAUTHORIZED", 403: "FORBIDDEN"}[want]
        else:
            assert response.headers["content-type"] == "application/problem+json"
            assert body["status"] == want


# -- every route against its service's scope table ------------------------------------------

SERVICES = ["broker", "registry", "changeserver", "bridge", "console"]
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE")
# A value for every path parameter of every service.
PARAMETERS = ("name", "partition", "version", "id", "subject", "unit", "blacklist_type")
SAMPLE = dict.fromkeys(PARAMETERS, "x")


def gate_and_routes(app: ASGIApp) -> tuple[AuthMiddleware, list[BaseRoute]]:
    """The service's authentication gate, and every route behind it: the app's Starlette
    routes and any route served ahead of its router (the changeserver's /changes)."""
    gate: AuthMiddleware | None = None
    routes: list[BaseRoute] = []
    layer: Any = app
    while not isinstance(layer, Starlette):
        if isinstance(layer, AuthMiddleware):
            gate = layer
        if isinstance(getattr(layer, "route", None), Route):
            routes.append(layer.route)
        layer = layer.app
    assert gate is not None, "served without AuthMiddleware"
    return gate, routes + list(layer.routes)


def concrete(template: str, values: dict[str, str]) -> str:
    """``/event-types/{name}`` with ``values["name"]`` (percent-encoded) in its place."""
    return re.sub(r"{(\w+)(:\w+)?}", lambda param: quote(values[param.group(1)], safe=""), template)


def routed(routes: list[BaseRoute]) -> dict[str, set[str]]:
    """Route path -> the methods some route serves there."""
    methods: dict[str, set[str]] = {}
    for route in routes:
        if isinstance(route, Route):
            methods.setdefault(route.path, set()).update(route.methods or ())
    return methods


@pytest.mark.parametrize("service", SERVICES)
def test_every_route_is_named_by_its_services_scope_table(world: World, service: str) -> None:
    """A route added without its rule fails here (and is closed meanwhile: the strictest
    scope); HEAD is asked for what GET is asked for; a method or path no rule names, for the
    strictest scope."""
    gate, routes = gate_and_routes(world.services[service][0])
    table = gate.scopes
    for route in routes:
        if isinstance(route, Mount):
            assert route.path + "/" in gate.open_prefixes, route.path
    for template, methods in routed(routes).items():
        path = concrete(template, SAMPLE)
        if gate.is_open(path):
            continue
        for method in methods:
            assert table.rule(method, path) is not None, f"{method} {template} has no rule"
        if "GET" in methods:
            assert table("HEAD", path) == table("GET", path), template
        for method in set(METHODS) - methods:
            assert table(method, path) == table.strictest, f"{method} {template}"
    for method in METHODS:
        assert table(method, "/no/such/route") == table.strictest


def test_the_brokers_scopes_are_the_nakadi_apis(world: World) -> None:
    """For every route the broker serves that the Nakadi API lists: the scope its ``security``
    section names, or none."""
    api = yaml.safe_load((REPO_ROOT / "docs/specs/nakadi-event-bus-api-0.10.1.yaml").read_text())
    _, routes = gate_and_routes(world.services["broker"][0])
    table = Scopes().table()
    listed = 0
    for template, methods in routed(routes).items():
        operations = api["paths"].get(template.replace("{id}", "{subscription_id}"), {})
        for method in methods - {"HEAD"}:
            operation = operations.get(method.lower())
            if operation is None:
                continue
            listed += 1
            security = operation.get("security") or [{"oauth2": [None]}]
            (scope,) = security[0]["oauth2"]
            assert table(method, concrete(template, SAMPLE)) == scope, f"{method} {template}"
    assert listed >= 30


def route_values(resources: Resources) -> dict[str, str]:
    """Path parameters naming the cell's own resources, so that answers are real ones."""
    return {
        "name": resources.event_type,
        "partition": "0",
        "version": "1",
        "id": resources.subscription,
        "subject": f"{resources.event_type}-value",
        "unit": "public.nothing",
        "blacklist_type": "CONSUMER_APP",
    }


@pytest.mark.parametrize("service", SERVICES)
def test_head_asks_for_what_get_asks_for_on_every_route(
    world: World, resources: Resources, service: str
) -> None:
    """A valid token without scopes: a HEAD of every route that answers GET gets GET's answer,
    403 wherever GET needs a scope."""
    app, client = world.services[service]
    gate, routes = gate_and_routes(app)
    scopeless = {"authorization": f"Bearer {world.token('scopeless', [])}"}
    values = route_values(resources)
    asked = 0
    for template, methods in routed(routes).items():
        path = concrete(template, values)
        if "HEAD" not in methods or gate.is_open(path):
            continue
        asked += 1
        head, get = client.head(path, headers=scopeless), client.get(path, headers=scopeless)
        assert head.status_code == get.status_code, f"HEAD {template}: {head.status_code}"
        if gate.scopes("GET", path) is not None:
            assert head.status_code == 403, template
        assert head.content == b""
    assert (
        asked
        >= {"broker": 15, "registry": 7, "changeserver": 4, "bridge": 2, "console": 12}[service]
    )


def test_a_head_of_a_stream_opens_no_stream_and_no_session(
    world: World, resources: Resources
) -> None:
    """Even for a caller with every scope: a HEAD of a stream answers 405 and holds nothing,
    so the subscription's real consumer gets every partition."""
    _, routes = gate_and_routes(world.services["broker"][0])
    assert set(routed(routes)) >= STREAMS, "a stream route moved: the HEAD guard misses it"
    admin = world.as_admin()
    for template in sorted(STREAMS):
        path = concrete(template, route_values(resources))
        for _ in range(3):
            answer = world.broker.head(path, headers=admin, params={"stream_timeout": 30})
            assert answer.status_code == 405, template
            assert "HEAD" not in answer.headers["allow"]
    with psycopg.connect(world.dsn) as conn:
        sessions = conn.execute(
            "SELECT count(*) FROM broker_subscription_sessions WHERE subscription_id = %s",
            (resources.subscription,),
        ).fetchone()
    assert sessions == (0,)
    params = {"stream_limit": 1, "stream_timeout": 1, "batch_flush_timeout": 1}
    path = f"/subscriptions/{resources.subscription}/events"
    stream = world.broker.get(path, params=params, headers=admin)
    assert stream.status_code == 200, stream.text
    assert b'"partition":"0"' in stream.content


# -- the broker's subjects in the registry --------------------------------------------------


def test_the_brokers_subjects_take_no_foreign_versions(
    world: World, resources: Resources, unique_name: Callable[[str], str]
) -> None:
    """Whoever holds registry.write, the administrators too: an event type's subject takes no
    version, metadata or mode through the registry (the registry's latest would no longer be
    the event type's schema), and nobody creates one ahead of its event type."""
    name = resources.event_type
    owned = {"tenant": "changebroker", "namespace": "event-types"}
    schema = {"serialization": "json", "schemaDefinition": {"type": "object", "title": "mine"}}
    latest = f"/subjects/{name}/versions/latest/schema"
    before = world.registry.get(latest, headers=world.as_admin()).json()
    for who in ("intruder", "ops"):
        headers = {"authorization": f"Bearer {world.token(who)}"}
        for refused in (
            world.registry.post(f"/subjects/{name}/versions", json=schema, headers=headers),
            world.registry.post(
                f"/subjects/{name}/versions", params=owned, json=schema, headers=headers
            ),
            world.registry.put(f"/config/{name}", json={"compatibility": "FULL"}, headers=headers),
            world.registry.post(
                f"/subjects/{name}", json={**owned, "description": "mine"}, headers=headers
            ),
        ):
            assert refused.status_code == 409, refused.text
            assert refused.json()["errorCode"] == 40902
            assert f"PUT /event-types/{name}" in refused.json()["errorMessage"]
    # Subject and schema as they were (mode, metadata, modification time included), and the
    # registry's latest still the event type's schema.
    assert world.registry.get(latest, headers=world.as_admin()).json() == before
    event_type = world.broker.get(f"/event-types/{name}", headers=world.as_admin()).json()
    assert event_type["schema"]["schema"] == before["schema"]["schemaDefinition"]
    # Registering the definition it has looks its id up, as for any subject.
    current = {"serialization": "json", "schemaDefinition": before["schema"]["schemaDefinition"]}
    found = world.registry.post(
        f"/subjects/{name}/versions",
        json=current,
        headers={"authorization": "Bearer " + world.token("intruder")},
    )
    assert found.json() == {"id": before["schema"]["id"]}

    # A name no event type has yet cannot be taken in the broker's namespace either.
    future = unique_name("future")
    squatted = world.registry.post(
        f"/subjects/{future}/versions", params=owned, json=schema, headers=world.as_admin()
    )
    assert squatted.status_code == 409, squatted.text
    created = world.broker.post(
        "/event-types", json=business_event_type(future), headers=world.as_admin()
    )
    assert created.status_code == 201, created.text
    # A subject of the same name in a tenant of one's own is one's own.
    mine = world.registry.post(
        f"/subjects/{name}/versions",
        params={"tenant": "shop", "namespace": "orders"},
        json=schema,
        headers=world.as_admin(),
    )
    assert mine.status_code == 200, mine.text
