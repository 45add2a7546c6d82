"""``changebroker bridge``: the bridge process, and its small HTTP face.

``/health`` (200 once the committed position is loaded; the body lists stopped units),
``/status`` (position, lag and progress per unit: what ``changebroker status`` shows),
``/metrics`` (Prometheus text) and ``POST /units/{unit}/resume`` (an operator fixed what
stopped a unit: publish its held changes; ``{"event_type": "new.name"}`` publishes the table
from there on into a new event type, for a schema change its old one refuses).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from broker.bridge.bridge import Bridge, Settings
from changebroker import config, http, logs

log = logging.getLogger(__name__)

SCOPE = "bridge"
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


def configure(parser: argparse.ArgumentParser) -> None:
    def option(flag: str, **kwargs: object) -> None:
        config.add_option(parser, flag, scope=SCOPE, **kwargs)  # type: ignore[arg-type]

    def names(text: str) -> tuple[str, ...]:
        return tuple(part.strip() for part in text.split(",") if part.strip())

    loopback = "http://127.0.0.1"
    option("--host", default="127.0.0.1", help="address of /health /status /metrics")
    option("--port", type=int, default=config.DEFAULT_BRIDGE_PORT, help="port of those")
    option(
        "--pg-url",
        env="CHANGEBROKER_PG_DSN",
        required=True,
        help="the application database (the tables' catalog: types, nullability, keys)",
    )
    option("--meta-pg-url", required=True, help="the broker's metadata database")
    option(
        "--kafka-bootstrap",
        env="CHANGEBROKER_KAFKA_BOOTSTRAP",
        default=f"127.0.0.1:{config.DEFAULT_KAFKA_PORT}",
        help="Kafka, where events and the bridge's position are committed together",
    )
    option(
        "--changeserver-url",
        default=f"{loopback}:{config.DEFAULT_CHANGESERVER_PORT}",
        help="the changeserver whose /changes the bridge reads",
    )
    option(
        "--broker-url",
        default=f"{loopback}:{config.DEFAULT_BROKER_PORT}",
        help="the broker that creates and evolves the event types",
    )
    option("--name", default="bridge", help="identity: transactional id and position key")
    option(
        "--selectors",
        type=names,
        default=("bridge",),
        help="comma-separated selectors to read: a row reaches the bridge when its selector"
        " column holds one of them",
    )
    option("--tables", type=names, default=(), help="comma-separated schema.table (default all)")
    option("--prefix", default="changebroker", help="the {prefix} of event type names")
    option(
        "--pattern",
        default="{prefix}.{schema}.{table}",
        help="event type name of a table, from {prefix}, {schema} and {table}",
    )
    option(
        "--outbox-table",
        default="public.changebroker_outbox",
        help="the outbox table (sql/outbox) whose inserts become events of their event type",
    )
    option("--partitions", type=int, default=4, help="partitions of a new table's event type")
    option("--limit", type=int, default=10_000, help="changes read (and committed) at most at once")


def settings_of(args: argparse.Namespace) -> Settings:
    return Settings(
        changeserver_url=args.changeserver_url,
        broker_url=args.broker_url,
        meta_dsn=args.meta_pg_url,
        app_dsn=args.pg_url,
        kafka_bootstrap=args.kafka_bootstrap,
        name=args.name,
        selectors=args.selectors,
        tables=args.tables,
        prefix=args.prefix,
        pattern=args.pattern,
        outbox_table=args.outbox_table,
        partitions=args.partitions,
        limit=args.limit,
    )


def create_app(bridge: Bridge) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(bridge.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def health(request: Request) -> Response:
        if not bridge.ready.is_set():
            return JSONResponse({"status": "STARTING"}, status_code=503)
        stopped = bridge.stopped
        body = {"status": "DEGRADED" if stopped else "OK", "stopped": stopped}
        return JSONResponse(body)

    async def status(request: Request) -> Response:
        return JSONResponse(bridge.status())

    async def metrics(request: Request) -> Response:
        return PlainTextResponse(render_metrics(bridge), media_type=PROMETHEUS_TEXT)

    async def resume(request: Request) -> Response:
        unit = request.path_params["unit"]
        body = await request.json() if await request.body() else {}
        if not bridge.resume(unit, body.get("event_type")):
            return JSONResponse({"detail": f"{unit} is not stopped"}, status_code=404)
        return JSONResponse({"resumed": unit})

    return Starlette(
        routes=[
            Route("/health", health),
            Route("/status", status),
            Route("/metrics", metrics),
            Route("/units/{unit}/resume", resume, methods=["POST"]),
        ],
        lifespan=lifespan,
    )


def render_metrics(bridge: Bridge) -> str:
    status = bridge.status()
    lines = [
        "# HELP changebroker_bridge_events_total Events committed to Kafka, per unit.",
        "# TYPE changebroker_bridge_events_total counter",
    ]
    units = status["units"]
    lines += [
        f'changebroker_bridge_events_total{{unit="{u}"}} {v["events"]}' for u, v in units.items()
    ]
    lines += [
        "# HELP changebroker_bridge_lag_bytes WAL bytes between a unit's position and the"
        " changeserver's newest change.",
        "# TYPE changebroker_bridge_lag_bytes gauge",
        *(
            f'changebroker_bridge_lag_bytes{{unit="{u}"}} {v["lag_bytes"]}'
            for u, v in units.items()
        ),
        "# HELP changebroker_bridge_stopped 1 while a unit is stopped waiting for an operator.",
        "# TYPE changebroker_bridge_stopped gauge",
        *(
            f'changebroker_bridge_stopped{{unit="{u}"}} {int(v["stopped"] is not None)}'
            for u, v in units.items()
        ),
    ]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    bridge = Bridge(settings_of(args))
    # One line per long poll would drown the log; failures are logged by the bridge itself.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    log.info("bridge starting", extra=logs.fields(port=args.port, name=args.name))
    http.serve(create_app(bridge), args.host, args.port)
    return 0
