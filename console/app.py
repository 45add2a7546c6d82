"""The console's Starlette app: the pages, the static assets, and the background sampler."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from changebroker import auth, metrics
from changebroker.console import (
    bridge_pages,
    changeserver_pages,
    event_types,
    login,
    overview,
    registry_pages,
    subscriptions,
)
from changebroker.console.context import HERE, Console, templates
from changebroker.console.history import History
from changebroker.console.sampler import sampling
from changebroker.console.upstream import Endpoints, Upstream


def create_app(
    endpoints: Endpoints,
    *,
    read_only: bool = False,
    sample_interval: float = 15.0,
    keep_seconds: float = 3 * 3600,
    authenticator: auth.Authenticator | None = None,
    read_scope: str = login.DEFAULT_READ_SCOPE,
    admin_scope: str = login.DEFAULT_ADMIN_SCOPE,
) -> ASGIApp:
    """The console; with an ``authenticator`` that checks tokens, operators sign in (pages
    need ``read_scope``, actions ``admin_scope``)."""
    authenticator = authenticator or auth.Off()
    console = Console(
        upstream=Upstream(endpoints),
        history=History(keep_seconds),
        templates=templates(),
        read_only=read_only,
        subscription_lag={},
        admin_scope=admin_scope,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            async with sampling(console, sample_interval):
                yield
        finally:
            await console.upstream.close()

    async def health(request: Request) -> Response:
        return PlainTextResponse("OK")

    routes: list[BaseRoute] = [
        Route("/health", health),
        metrics.route(),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        *login.routes(console, authenticator, read_scope),
        *overview.routes(console),
        *event_types.routes(console),
        *subscriptions.routes(console),
        *registry_pages.routes(console),
        *changeserver_pages.routes(console),
        *bridge_pages.routes(console),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.console = console
    return SecurityHeaders(login.protect(app, console, authenticator, read_scope, admin_scope))


# The pages show names and payloads others chose: everything is escaped, and a browser is also
# told to run no script and load nothing but this console's own files, to show the console in
# no frame (clickjacking), and to take each file as the type it is served as.
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self';"
        b" connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
]


class SecurityHeaders:
    """``SECURITY_HEADERS`` on every answer: pages, refusals, the sign-in form, static files."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", []), *SECURITY_HEADERS]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
