"""Bridge: its tables (units) with position, lag and state: running, snapshotting with its
progress, or stopped with the reason and a resume button."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from changebroker.console.context import Console, gather, redirect
from changebroker.console.history import svg_chart


@dataclass(frozen=True)
class Unit:
    name: str
    event_type: str
    position: str
    lag_bytes: int
    events: int
    state: str  # running | snapshotting | stopped
    reason: str
    snapshot: dict[str, Any] | None

    @property
    def snapshot_progress(self) -> str:
        """``"1,200 of ~5,000 rows (24%)"`` from the snapshot's rows read and estimate."""
        if not self.snapshot:
            return ""
        read = int(self.snapshot.get("rows_read") or 0)
        estimate = int(self.snapshot.get("estimated_rows") or 0)
        if estimate <= 0:
            return f"{read:,} rows read"
        return f"{read:,} of ~{estimate:,} rows ({min(100, read * 100 // estimate)}%)"


def unit_of(name: str, info: dict[str, Any]) -> Unit:
    snapshot = info.get("snapshot") if isinstance(info.get("snapshot"), dict) else None
    stopped = info.get("stopped")
    if stopped:
        state = "stopped"
    elif snapshot and snapshot.get("state") == "running":
        state = "snapshotting"
    else:
        state = "running"
    return Unit(
        name,
        str(info.get("event_type") or ""),
        str(info.get("position") or ""),
        int(info.get("lag_bytes") or 0),
        int(info.get("events") or 0),
        state,
        str(stopped or info.get("refused") or ""),
        snapshot,
    )


def routes(console: Console) -> list[BaseRoute]:
    up = console.upstream

    async def show(request: Request) -> Response:
        status, health = await gather(up.bridge("GET", "/status"), up.bridge("GET", "/health"))
        body = status.fields
        units = [unit_of(n, i) for n, i in sorted((body.get("units") or {}).items())]
        return console.page(
            request,
            "bridge.html",
            title="Bridge",
            problem=status.problem,
            status=body,
            health=health.fields,
            units=units,
            chart=svg_chart(
                console.history.get("bridge:lag_bytes"), title="Bridge lag", unit="WAL bytes"
            ),
            resumed=request.query_params.get("resumed", ""),
        )

    @console.action
    async def resume(request: Request) -> Response:
        unit = request.path_params["unit"]
        form = await request.form()
        event_type = str(form.get("event_type", "")).strip()
        reply = await up.bridge(
            "POST",
            f"/units/{quote(unit)}/resume",
            json_body={"event_type": event_type} if event_type else {},
        )
        if not reply.ok:
            return console.not_done(request, "Not resumed", reply.problem)
        return redirect(f"/bridge?resumed={quote(unit)}")

    return [
        Route("/bridge", show),
        Route("/bridge/units/{unit}/resume", resume, methods=["POST"]),
    ]
