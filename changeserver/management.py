"""The management paths: ``/health``, ``/ready``, ``/markdown``, and ``/diagnostics/stack``
beside ``/changes``; the state they report and change."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from changebroker.changeserver import diagnostics
from changebroker.changeserver.longpoll import Waiters
from changebroker.changeserver.query import JSON


@dataclass
class State:
    """What /ready and /markdown report and change."""

    streaming: threading.Event  # set while the replication stream is up
    # Why replication stopped for good (a lost slot under the "fail" policy), if it did.
    failure: Callable[[], str | None] = lambda: None
    marked_down: bool = False
    waiters: Waiters = field(default_factory=Waiters)


def _status(request: Request, status: str, reason: str) -> Response:
    if JSON in request.headers.get("accept", ""):
        return JSONResponse({"status": status, "reason": reason}, status_code=503)
    return PlainTextResponse(reason, status_code=503)


async def _stack(request: Request) -> Response:
    return PlainTextResponse(diagnostics.stacks())


def stack_route(prefix: str) -> Route:
    """``/diagnostics/stack`` under ``prefix`` (transicator serves it beside /changes)."""
    return Route(base(prefix) + "/diagnostics/stack", _stack, methods=["GET"])


def management_routes(state: State) -> list[Route]:
    async def health(request: Request) -> Response:
        failure = state.failure()
        if failure is not None:
            return _status(request, "Down", failure)
        return PlainTextResponse("OK")

    async def ready(request: Request) -> Response:
        failure = state.failure()
        if failure is not None:
            return _status(request, "NotReady", failure)
        if state.marked_down:
            return _status(request, "NotReady", "marked down")
        if not state.streaming.is_set():
            return _status(request, "NotReady", "replication is not streaming")
        return PlainTextResponse("OK")

    async def markdown(request: Request) -> Response:
        # GET only, as transicator configures it: not even the HEAD that GET routes allow.
        if request.method != "GET":
            raise HTTPException(405, headers={"Allow": "GET"})
        state.marked_down = True
        # Parked long polls answer now, with what there is: their clients' next polls go to
        # a server that stays (the load balancer sees /ready 503 from now on).
        state.waiters.wake_all()
        return PlainTextResponse("marked down")

    return [
        Route("/health", health),
        Route("/ready", ready),
        Route("/markdown", markdown, methods=["GET"]),
    ]


def base(prefix: str) -> str:
    """``v1``, ``/v1`` and ``/v1/`` all give ``/v1``; none gives ``""``."""
    return "/" + prefix.strip("/") if prefix.strip("/") else ""
