"""Event types: search, one type's partitions and schema versions (with a diff of any two),
publishing a test event, and the latest events of a partition."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from changebroker.console import diff
from changebroker.console.context import PAGE_SIZE, Console, gather, page_number
from changebroker.console.upstream import Reply

EVENTS_PAGE = 20
SCHEMA_VERSIONS = 100
# How long the broker's low-level stream may keep a page waiting (seconds).
STREAM_TIMEOUT = 1


def _items(reply: Reply) -> list[Any]:
    if isinstance(reply.body, list):
        return reply.body
    if isinstance(reply.body, dict):
        return list(reply.body.get("items", []))
    return []


def sample_event(event_type: dict[str, Any]) -> str:
    """A starting point for a test event of ``event_type``'s category."""
    metadata = {"eid": str(uuid.uuid4()), "occurred_at": datetime.now(UTC).isoformat()}
    category = event_type.get("category")
    event: dict[str, Any]
    if category == "data":
        event = {
            "metadata": metadata,
            "data_type": event_type.get("name", ""),
            "data_op": "C",
            "data": {},
        }
    elif category == "undefined":
        event = {}
    else:
        event = {"metadata": metadata}
    return json.dumps([event], indent=2)


def routes(console: Console) -> list[BaseRoute]:
    up = console.upstream

    async def index(request: Request) -> Response:
        query = request.query_params.get("q", "").strip().lower()
        page = page_number(request)
        reply = await up.broker("GET", "/event-types")
        found = [
            t
            for t in _items(reply)
            if not query
            or query in t.get("name", "").lower()
            or query in str(t.get("owning_application", "")).lower()
        ]
        found.sort(key=lambda t: t.get("name", ""))
        shown = found[page * PAGE_SIZE : (page + 1) * PAGE_SIZE]
        return console.page(
            request,
            "event_types.html",
            title="Event types",
            problem=reply.problem,
            query=query,
            event_types=shown,
            total=len(found),
            page=page,
            more=(page + 1) * PAGE_SIZE < len(found),
        )

    async def detail(request: Request, published: Reply | None = None, sent: str = "") -> Response:
        name = request.path_params["name"]
        base = f"/event-types/{name}"
        left, right = request.query_params.get("a"), request.query_params.get("b")
        event_type, partitions, schemas = await gather(
            up.broker("GET", base),
            up.broker("GET", base + "/partitions"),
            up.broker("GET", base + "/schemas", params={"limit": SCHEMA_VERSIONS}),
        )
        if event_type.status == 404:
            return console.not_found(request, f"event type {name}")
        versions = _items(schemas)
        by_version = {v.get("version"): v for v in versions}
        if (left is None or right is None) and len(versions) >= 2:
            # Newest first: compare the previous version with the newest.
            right, left = versions[0].get("version"), versions[1].get("version")
        rows: list[diff.Row] = []
        added: list[str] = []
        removed: list[str] = []
        if left in by_version and right in by_version:
            old, new = by_version[left].get("schema"), by_version[right].get("schema")
            rows = diff.side_by_side(old, new)
            added, removed = diff.field_changes(old, new)
        body = event_type.fields
        return console.page(
            request,
            "event_type.html",
            title=name,
            name=name,
            problems=[r.problem for r in (event_type, partitions, schemas) if r.problem],
            event_type=body,
            partitions=_items(partitions),
            versions=versions,
            left=left,
            right=right,
            rows=rows,
            added=added,
            removed=removed,
            published=published,
            sent=sent or sample_event(body),
        )

    @console.action
    async def publish(request: Request) -> Response:
        name = request.path_params["name"]
        form = await request.form()
        sent = str(form.get("events", ""))
        # Sent as typed: the broker's own answer (400 for bad JSON, 422 per event) is shown.
        reply = await up.broker(
            "POST",
            f"/event-types/{name}/events",
            content=sent.encode(),
            headers={"Content-Type": "application/json"},
        )
        return await detail(request, published=reply, sent=sent)

    async def events(request: Request) -> Response:
        name = request.path_params["name"]
        partition = request.path_params["partition"]
        page = page_number(request)
        base = f"/event-types/{name}"
        count = await up.broker(
            "GET", f"{base}/partitions/{partition}", params={"consumed_offset": "begin"}
        )
        info = count.fields
        total = int(info.get("unconsumed_events") or 0)
        newest = info.get("newest_available_offset")
        end = max(0, total - page * EVENTS_PAGE)  # events of this page: [start, end)
        start = max(0, end - EVENTS_PAGE)
        found: list[Any] = []
        problem = count.problem
        if end > start and newest is not None:
            found, problem = await _read(console, name, partition, newest, total, start, end)
        return console.page(
            request,
            "events.html",
            title=f"{name} partition {partition}",
            name=name,
            partition=partition,
            page=page,
            total=total,
            first=start,
            events=list(reversed(found)),
            more=start > 0,
            problem=problem,
        )

    return [
        Route("/event-types", index),
        Route("/event-types/{name}", detail),
        Route("/event-types/{name}/publish", publish, methods=["POST"]),
        Route("/event-types/{name}/partitions/{partition}/events", events),
    ]


async def _read(
    console: Console, name: str, partition: str, newest: str, total: int, start: int, end: int
) -> tuple[list[Any], str]:
    """Events ``start`` to ``end`` (0 = oldest available) through the low-level stream."""
    up = console.upstream
    base = f"/event-types/{name}"
    if start == 0:
        offset = "begin"
    else:
        # The cursor is the last event *before* the page: ``total - start`` events back.
        shifted = await up.broker(
            "POST",
            f"{base}/shifted-cursors",
            json_body=[{"partition": partition, "offset": newest, "shift": start - total}],
        )
        if not shifted.ok or not isinstance(shifted.body, list):
            return [], shifted.problem
        offset = shifted.body[0]["offset"]
    stream = await up.broker(
        "GET",
        f"{base}/events",
        params={
            "batch_limit": str(end - start),
            "stream_limit": str(end - start),
            "stream_timeout": str(STREAM_TIMEOUT),
            "batch_flush_timeout": str(STREAM_TIMEOUT),
        },
        headers={"X-Nakadi-Cursors": json.dumps([{"partition": partition, "offset": offset}])},
        timeout=STREAM_TIMEOUT + 5,
    )
    if not stream.ok:
        return [], stream.problem
    found: list[Any] = []
    for line in stream.text.splitlines():
        if line.strip():
            found += json.loads(line).get("events", [])
    return found[: end - start], ""
