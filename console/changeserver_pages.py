"""Changeserver: its first and last sequence, the slot's retained WAL, the change log's size
and retention, long-poll waiters by selector, the newest snapshot (its management /status),
health and readiness, and marking it down (GET /markdown) behind a confirmation. A fleet's
servers are listed each with its slot, sequences and readiness, each marked down on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from changebroker.console.changeserver_facts import facts
from changebroker.console.context import Console, gather, redirect
from changebroker.console.overview import health_of


@dataclass(frozen=True)
class FleetServer:
    number: int  # 1-based, as ``?server=`` names it
    url: str  # its management URL
    slot: str
    first: str
    last: str
    ready: bool
    detail: str  # why not ready, or the error reaching it


async def _fleet(console: Console) -> list[FleetServer]:
    up = console.upstream
    servers = up.endpoints.changeserver_fleet
    replies = await gather(
        *(up.changeserver_mgmt("/status", server) for server in servers),
        *(
            up.call("GET", server + "/ready", headers={"Accept": "application/json"})
            for server in servers
        ),
    )
    found = []
    for number, (url, status, ready) in enumerate(
        zip(servers, replies[: len(servers)], replies[len(servers) :], strict=True), start=1
    ):
        body = status.fields
        detail = "" if ready.ok else ready.fields.get("reason") or ready.problem
        found.append(
            FleetServer(
                number,
                url,
                str(body.get("slot", "unknown")),
                str(body.get("first_sequence", "unknown")),
                str(body.get("last_sequence", "unknown")),
                ready.ok,
                str(detail),
            )
        )
    return found


def _chosen(console: Console, request: Request) -> str | None:
    """The fleet server ``?server=N`` names (None: the one changeserver)."""
    servers = console.upstream.endpoints.changeserver_fleet
    raw = request.query_params.get("server", "")
    if raw.isdigit() and 1 <= int(raw) <= len(servers):
        return servers[int(raw) - 1]
    return None


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
            fleet=await _fleet(console),
        )

    async def confirm(request: Request) -> Response:
        server = _chosen(console, request)
        return console.page(
            request,
            "markdown.html",
            title="Mark the changeserver down",
            server=server,
            number=request.query_params.get("server") if server else None,
        )

    @console.action
    async def markdown(request: Request) -> Response:
        reply = await up.changeserver_mgmt("/markdown", _chosen(console, request))
        if not reply.ok:
            return console.not_done(request, "Not marked down", reply.problem)
        return redirect("/changeserver?markdown=done")

    return [
        Route("/changeserver", show),
        Route("/changeserver/markdown", confirm),
        Route("/changeserver/markdown", markdown, methods=["POST"]),
    ]
