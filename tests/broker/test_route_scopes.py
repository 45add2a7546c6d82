"""Every route of the broker against its scope table (``Scopes.table`` in
broker/authorization.py): each method of each route, mounted ones too, is named by a rule or
is one of the open paths; and a route the table does not name needs the strictest scope,
refused in Nakadi's Problem format to a token that has a lesser one."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp

from changebroker.auth import AuthMiddleware, AuthSettings
from changebroker.broker.app import create_app
from changebroker.broker.authorization import OPEN_PATHS, Scopes
from changebroker.broker.settings import Settings
from changebroker.stack.run import serve_in_thread
from tests.broker.test_admin_settings import bearer, problem
from tests.support.credentials import tokens_file

UNLISTED = "/a-route-the-scope-table-does-not-name"
STRICTEST = Scopes().config_write
READER = "nakadi.event_stream.read"


def layers(app: ASGIApp) -> tuple[AuthMiddleware, Starlette]:
    """The authentication gate the broker is served behind, and the Starlette app inside."""
    gate: AuthMiddleware | None = None
    layer: Any = app
    while not isinstance(layer, Starlette):
        if isinstance(layer, AuthMiddleware):
            gate = layer
        layer = layer.app
    assert gate is not None, "the broker is served without AuthMiddleware"
    return gate, layer


def endpoints(routes: list[BaseRoute], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(method, path template) of every route, those of mounted apps under their mount's
    path; HEAD left out (the table reads it as GET)."""
    for route in routes:
        if isinstance(route, Mount):
            yield from endpoints(route.routes, prefix + route.path)
        elif isinstance(route, Route):
            for method in sorted((route.methods or set()) - {"HEAD"}):
                yield method, prefix + route.path
        else:
            raise AssertionError(f"{route!r}: a kind of route this walk does not know")


def concrete(template: str) -> str:
    """A path the template matches: every parameter ``x``."""
    return re.sub(r"{\w+(:\w+)?}", "x", template)


def test_every_route_and_method_of_the_broker_has_its_entry() -> None:
    settings = Settings(pg_dsn="postgresql://unused", kafka_bootstrap="unused:9092")
    gate, app = layers(create_app(settings))
    assert gate.open_paths == OPEN_PATHS
    found = list(endpoints(app.routes))
    # The walk saw the broker's routes, not an empty app: publishing, streams, settings.
    assert ("POST", "/event-types/{name}/events") in found
    assert ("GET", "/subscriptions/{id}/events") in found
    assert ("PUT", "/settings/blacklist/{blacklist_type}/{name}") in found
    missing = [
        f"{method} {template}"
        for method, template in found
        if concrete(template) not in OPEN_PATHS
        and gate.scopes.rule(method, concrete(template)) is None
    ]
    assert missing == [], "routes without an entry in Scopes.table (they need the strictest)"
    assert gate.scopes.strictest == STRICTEST
    for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
        assert gate.scopes(method, UNLISTED) == STRICTEST


@pytest.fixture(scope="module")
def with_unlisted_route(
    broker_dsn: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[httpx.Client]:
    """A broker checking tokens, serving one route more than its scope table names."""
    tokens = tokens_file(
        tmp_path_factory.mktemp("auth") / "tokens.json",
        {"reader": ("shop", [READER]), "configurer": ("ops", [STRICTEST])},
    )
    auth = AuthSettings(mode="tokens", tokens_file=tokens)
    served = create_app(Settings(pg_dsn=broker_dsn, kafka_bootstrap=kafka_bootstrap, auth=auth))

    async def unlisted(request: Request) -> Response:
        return PlainTextResponse("served")

    layers(served)[1].router.routes.append(Route(UNLISTED, unlisted, methods=["GET", "POST"]))
    with (
        serve_in_thread(served) as url,
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        yield http


def test_a_route_the_table_does_not_name_needs_the_strictest_scope(
    with_unlisted_route: httpx.Client,
) -> None:
    http = with_unlisted_route
    # The reader's token is good where its scope is what the table asks for.
    assert http.get("/registry/partition-strategies", headers=bearer("reader")).status_code == 200
    for method in ("GET", "POST"):
        refused = http.request(method, UNLISTED, headers=bearer("reader"))
        body = problem(refused, 403)
        assert body == {
            "title": "Forbidden",
            "status": 403,
            "detail": f"the token lacks the scope {STRICTEST}",
        }
        served = http.request(method, UNLISTED, headers=bearer("configurer"))
        assert served.status_code == 200, served.text
        assert served.text == "served"
    problem(http.get(UNLISTED), 401)
