"""Subscriptions: the list with their lag, one subscription's lag per partition and over time,
and a cursor reset behind a confirmation that names what will be re-read."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from changebroker.console.context import PAGE_SIZE, Console, gather, page_number, redirect
from changebroker.console.history import svg_chart
from changebroker.console.upstream import Reply


@dataclass(frozen=True)
class Reset:
    """One partition's cursor as it is, as it would be, and the events read again."""

    event_type: str
    partition: str
    committed: str
    target: str
    reread: int


def routes(console: Console) -> list[BaseRoute]:
    up = console.upstream

    async def index(request: Request) -> Response:
        page = page_number(request)
        params: list[tuple[str, str]] = [
            ("limit", str(PAGE_SIZE)),
            ("offset", str(page * PAGE_SIZE)),
        ]
        owner = request.query_params.get("owning_application", "").strip()
        event_type = request.query_params.get("event_type", "").strip()
        if owner:
            params.append(("owning_application", owner))
        if event_type:
            params.append(("event_type", event_type))
        reply = await up.broker("GET", "/subscriptions", params=params)
        body = reply.fields
        return console.page(
            request,
            "subscriptions.html",
            title="Subscriptions",
            problem=reply.problem,
            subscriptions=body.get("items", []),
            lag=console.subscription_lag,
            owner=owner,
            event_type=event_type,
            page=page,
            more="next" in body.get("_links", {}),
        )

    async def detail(request: Request) -> Response:
        sid = request.path_params["id"]
        base = f"/subscriptions/{quote(sid)}"
        time_lag = request.query_params.get("time_lag") == "true"
        subscription, stats, cursors = await gather(
            up.broker("GET", base),
            # The time lag makes the broker read each partition's oldest unconsumed event
            # from Kafka (seconds): only when asked.
            up.broker("GET", base + "/stats", params={"show_time_lag": str(time_lag).lower()}),
            up.broker("GET", base + "/cursors"),
        )
        if subscription.status == 404:
            return console.not_found(request, f"subscription {sid}")
        stats_items = stats.fields.get("items", [])
        streams = sorted(
            {
                p["stream_id"]
                for item in stats_items
                for p in item.get("partitions", [])
                if p.get("stream_id")
            }
        )
        return console.page(
            request,
            "subscription.html",
            title=f"Subscription {sid}",
            sid=sid,
            problems=[r.problem for r in (subscription, stats, cursors) if r.problem],
            subscription=subscription.fields,
            stats=stats_items,
            streams=streams,
            cursors=cursors.fields.get("items", []),
            chart=svg_chart(
                console.history.get(f"subscription:{sid}"),
                title="Unconsumed events",
                unit="events",
            ),
            done=request.query_params.get("reset") == "done",
            time_lag=time_lag,
        )

    async def confirm(request: Request) -> Response:
        sid = request.path_params["id"]
        target = request.query_params.get("to", "begin")
        resets, problem = await plan(console, sid, target)
        return console.page(
            request,
            "reset.html",
            title=f"Reset cursors of {sid}",
            sid=sid,
            target=target,
            resets=resets,
            problem=problem,
        )

    @console.action
    async def reset(request: Request) -> Response:
        sid = request.path_params["id"]
        form = await request.form()
        resets, problem = await plan(console, sid, str(form.get("to", "begin")))
        if problem:
            return console.not_done(request, "Not reset", problem)
        items = [
            {"event_type": r.event_type, "partition": r.partition, "offset": r.target}
            for r in resets
        ]
        reply = await up.broker(
            "PATCH", f"/subscriptions/{quote(sid)}/cursors", json_body={"items": items}
        )
        if not reply.ok:
            return console.not_done(request, "Not reset", reply.problem)
        return redirect(f"/subscriptions/{quote(sid)}?reset=done")

    return [
        Route("/subscriptions", index),
        Route("/subscriptions/{id}", detail),
        Route("/subscriptions/{id}/reset", confirm),
        Route("/subscriptions/{id}/reset", reset, methods=["POST"]),
    ]


async def plan(console: Console, sid: str, target: str) -> tuple[list[Reset], str]:
    """Every partition's reset to ``begin`` (oldest available) or ``end`` (newest), and how
    many events each would read again (to ``begin``) or skip (to ``end``, as a negative)."""
    up = console.upstream
    cursors = await up.broker("GET", f"/subscriptions/{quote(sid)}/cursors")
    if not cursors.ok or not isinstance(cursors.body, dict):
        return [], cursors.problem
    committed: dict[str, list[dict[str, Any]]] = {}
    for cursor in cursors.body.get("items", []):
        committed.setdefault(cursor["event_type"], []).append(cursor)
    if not committed:
        committed, problem = await _implied_cursors(console, sid)
        if problem:
            return [], problem
    names = sorted(committed)

    def lag_after(name: str, offset: str | None) -> Awaitable[Reply]:
        """The partitions with the events after each cursor (``None``: the committed one)."""
        consumed = [
            {"partition": c["partition"], "offset": offset or c["offset"]} for c in committed[name]
        ]
        return up.broker(
            "GET", f"/event-types/{name}/partitions", params={"cursors": json.dumps(consumed)}
        )

    replies = await gather(
        *(lag_after(n, None) for n in names), *(lag_after(n, "begin") for n in names)
    )
    resets: list[Reset] = []
    for name, behind, retained in zip(names, replies, replies[len(names) :], strict=False):
        for reply in (behind, retained):
            if not reply.ok or not isinstance(reply.body, list):
                return [], reply.problem
        unconsumed = {p["partition"]: p for p in behind.body}
        available = {p["partition"]: p for p in retained.body}
        for cursor in committed[name]:
            view = unconsumed[cursor["partition"]]
            after = int(view["unconsumed_events"])
            if target == "end":
                new, count = view["newest_available_offset"], -after
            else:
                new = "begin"
                count = int(available[cursor["partition"]]["unconsumed_events"]) - after
            resets.append(Reset(name, cursor["partition"], cursor["offset"], new, count))
    return resets, ""


async def _implied_cursors(console: Console, sid: str) -> tuple[dict[str, list[Any]], str]:
    """Where a subscription nobody has read yet starts: its ``read_from`` (the broker sets
    its cursors only when the first stream opens, or on a reset)."""
    up = console.upstream
    subscription = await up.broker("GET", f"/subscriptions/{quote(sid)}")
    if not subscription.ok or not isinstance(subscription.body, dict):
        return {}, subscription.problem
    body = subscription.body
    names = sorted(body.get("event_types", []))
    replies = await gather(*(up.broker("GET", f"/event-types/{n}/partitions") for n in names))
    initial = {
        (c.get("event_type"), c.get("partition")): c.get("offset")
        for c in body.get("initial_cursors") or []
    }
    implied: dict[str, list[Any]] = {}
    for name, reply in zip(names, replies, strict=True):
        if not reply.ok or not isinstance(reply.body, list):
            return {}, reply.problem
        for view in reply.body:
            partition = view["partition"]
            offset = {"begin": "begin", "end": view["newest_available_offset"]}.get(
                body.get("read_from", "end"), initial.get((name, partition), "begin")
            )
            implied.setdefault(name, []).append({"partition": partition, "offset": offset})
    return implied, ""
