"""The overview: every service's health and readiness, and the pipeline
Postgres -> changeserver -> bridge -> Kafka/broker -> subscriptions with lag per arrow."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from changebroker.console.changeserver_facts import facts
from changebroker.console.context import Console, gather
from changebroker.console.history import svg_chart
from changebroker.console.sampler import lsn
from changebroker.console.upstream import Reply


@dataclass(frozen=True)
class Health:
    service: str
    check: str
    url: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Stage:
    name: str
    detail: str
    ok: bool
    href: str


@dataclass(frozen=True)
class Arrow:
    """What flows between two stages: its lag, and its rate when samples give one."""

    lag: str
    rate: str


def health_of(service: str, check: str, reply: Reply) -> Health:
    if not reply.answered:
        return Health(service, check, reply.url, False, f"no answer: {reply.error}")
    body = reply.fields
    detail = str(body.get("status") or reply.text.strip()[:120] or reply.status)
    if body.get("reason"):
        detail += f" ({body['reason']})"
    if body.get("stopped"):
        detail += " — stopped: " + ", ".join(sorted(body["stopped"]))
    return Health(service, check, reply.url, reply.ok, detail)


def _per_second(value: float | None, unit: str) -> str:
    return "rate: not sampled yet" if value is None else f"{value:,.1f} {unit}/s"


def routes(console: Console) -> list[BaseRoute]:
    async def overview(request: Request) -> Response:
        up = console.upstream
        replies = await gather(
            # Its /health is Nakadi's plain OK; /status says whether Postgres and Kafka answer.
            up.broker("GET", "/status"),
            up.registry("GET", "/health"),
            up.changeserver_mgmt("/health"),
            up.call(
                "GET",
                up.endpoints.changeserver_mgmt + "/ready",
                headers={"Accept": "application/json"},
            ),
            up.bridge("GET", "/health"),
            up.bridge("GET", "/status"),
            up.changeserver("/changes", params={"limit": "0"}),
            up.changeserver_mgmt("/status"),
        )
        broker, registry, cs_health, cs_ready, bridge_health, status, changes, cs_status = replies
        checks = [
            health_of("broker", "status", broker),
            health_of("registry", "health", registry),
            health_of("changeserver", "health", cs_health),
            health_of("changeserver", "ready", cs_ready),
            health_of("bridge", "health", bridge_health),
        ]
        stages, arrows = pipeline(console, cs_ready, changes, status, bridge_health, broker)
        lag = console.history.get("subscriptions:unconsumed")
        bridge_lag = console.history.get("bridge:lag_bytes")
        return console.page(
            request,
            "overview.html",
            title="Overview",
            checks=checks,
            stages=stages,
            arrows=arrows,
            changeserver_facts=facts(cs_status),
            bridge_chart=svg_chart(bridge_lag, title="Bridge lag", unit="WAL bytes"),
            subscriptions_chart=svg_chart(
                lag, title="Unconsumed events, all subscriptions", unit="events"
            ),
        )

    return [Route("/", overview)]


def pipeline(
    console: Console,
    cs_ready: Reply,
    changes: Reply,
    status: Reply,
    bridge_health: Reply,
    broker: Reply,
) -> tuple[list[Stage], list[Arrow]]:
    history = console.history
    changes_body: dict[str, Any] = changes.fields
    status_body: dict[str, Any] = status.fields
    last = changes_body.get("lastSequence")
    position = status_body.get("position")
    units = status_body.get("units") or {}
    stopped = sorted(unit for unit, info in units.items() if info.get("stopped"))
    subscriptions = console.subscription_lag
    behind = sum(1 for value in subscriptions.values() if value)

    stages = [
        Stage("Postgres", "logical replication slot", cs_ready.ok, "/changeserver"),
        Stage(
            "changeserver",
            f"last sequence {last}" if last else changes.problem,
            changes.ok and cs_ready.ok,
            "/changeserver",
        ),
        Stage(
            "bridge",
            f"position {position}" + (f"; stopped: {', '.join(stopped)}" if stopped else "")
            if status.ok
            else status.problem,
            bridge_health.ok and not stopped,
            "/bridge",
        ),
        Stage(
            "Kafka / broker",
            "broker healthy" if broker.ok else broker.problem,
            broker.ok,
            "/event-types",
        ),
        Stage(
            "subscriptions",
            f"{len(subscriptions)} sampled, {behind} behind",
            True,
            "/subscriptions",
        ),
    ]
    last_lsn, position_lsn = lsn(last), lsn(position)
    bridge_lag = (
        f"lag {max(0, last_lsn - position_lsn):,} WAL bytes"
        if last_lsn is not None and position_lsn is not None
        else "lag unknown (bridge or changeserver not answering)"
    )
    sampled = console.sampled_at
    age = f" (sampled {time.time() - sampled:.0f} s ago)" if sampled else " (not sampled yet)"
    arrows = [
        Arrow(
            "replication: " + ("streaming" if cs_ready.ok else "not ready"),
            _per_second(history.get("changeserver:last_lsn").rate(), "WAL bytes"),
        ),
        Arrow(bridge_lag, _per_second(history.get("bridge:events").rate(), "events")),
        Arrow(
            f"{len(stopped)} table(s) stopped" if stopped else "every table publishing",
            _per_second(history.get("bridge:events").rate(), "events committed"),
        ),
        Arrow(
            f"lag {sum(subscriptions.values()):,} unconsumed events" + age,
            _per_second(history.get("subscriptions:unconsumed").rate(), "backlog change"),
        ),
    ]
    return stages, arrows
