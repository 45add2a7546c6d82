"""Changeserver: its first and last sequence, the slot's retained WAL, the change log's size
and retention, long-poll waiters by selector, the newest snapshot (its management /status),
health and readiness, and marking it down (GET /markdown) behind a confirmation."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from console.changeserver_facts import facts
from console.context import Console, gather, redirect
from console.overview import health_of


def routes(console: Console) -> list[BaseRoute]:
    up = console.upstream

    async def show(request: Request) -> Response:
        changes, health, ready, status = await gather(
            up.changeserver("/changes", params={"limit": "0"}),
            up.changeserver_mgmt("/health"),
            up.call(
                "GET",
                up.endpoints.changeserver_mgmt + "/ready",
                headers={"Accept": "application/json"},
            ),
            up.changeserver_mgmt("/status"),
        )
        bounds = changes.fields
        return console.page(
            request,
            "changeserver.html",
            title="Changeserver",
            problem=changes.problem,
            first=bounds.get("firstSequence"),
            last=bounds.get("lastSequence"),
            checks=[
                health_of("changeserver", "health", health),
                health_of("changeserver", "ready", ready),
            ],
            url=up.endpoints.changeserver,
            done=request.query_params.get("markdown") == "done",
            ingest=console.history.get("changeserver:last_lsn").rate(),
            changeserver_facts=facts(status),
        )

    async def confirm(request: Request) -> Response:
        return console.page(request, "markdown.html", title="Mark the changeserver down")

    @console.action
    async def markdown(request: Request) -> Response:
        reply = await up.changeserver_mgmt("/markdown")
        if not reply.ok:
            return console.not_done(request, "Not marked down", reply.problem)
        return redirect("/changeserver?markdown=done")

    return [
        Route("/changeserver", show),
        Route("/changeserver/markdown", confirm),
        Route("/changeserver/markdown", markdown, methods=["POST"]),
    ]
