"""``changebroker bridge``: the bridge process, and its small HTTP face.

``/health`` (200 once the committed position is loaded; the body lists stopped units),
``/status`` (position, lag and progress per unit: what ``changebroker status`` shows),
``/metrics`` (Prometheus text: ``metrics.py``), ``POST /units/{unit}/resume`` (an operator
fixed what stopped a unit: publish its held changes; ``{"event_type": "new.name"}`` publishes
the table from there on into a new event type, for a schema change its old one refuses) and
``POST /units/{table}/snapshot`` (publish the table again as ``S`` events).

``changebroker bridge [--host H] [--port P] snapshot TABLE`` asks a running bridge for that.
"""

from __future__ import annotations

import argparse
import logging
import sys
from contextlib import AbstractAsyncContextManager

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from changebroker import auth, config, http, logs, metrics, tasks
from changebroker.bridge.bridge import Bridge
from changebroker.bridge.metrics import BridgeCollector
from changebroker.bridge.settings import Settings

log = logging.getLogger(__name__)

SCOPE = "bridge"
DEFAULT_ADMIN_SCOPE = "bridge.admin"


def configure(parser: argparse.ArgumentParser) -> None:
    # --host and --port: where /health /status /metrics answer.
    option = config.service_options(parser, SCOPE, config.DEFAULT_BRIDGE_PORT)

    def names(text: str) -> tuple[str, ...]:
        return tuple(part.strip() for part in text.split(",") if part.strip())

    def keys(text: str) -> dict[str, tuple[str, ...]]:
        found = {}
        for part in text.split(";"):
            table, equals, columns = part.partition("=")
            if not part.strip():
                continue
            if not equals or not names(columns):
                raise argparse.ArgumentTypeError(f"--key wants schema.table=col1,col2: {part!r}")
            found[table.strip()] = names(columns)
        return found

    loopback = "http://127.0.0.1"
    option(
        "--pg-url",
        env="CHANGEBROKER_PG_DSN",
        help="the application database (required): catalog, snapshots, watermarks",
    )
    option("--meta-pg-url", help="the broker's metadata database (required)")
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
        "--include",
        type=names,
        default=(),
        help="comma-separated schema.table globs to publish (default: every table of the"
        " publication but the product's own)",
    )
    option("--exclude", type=names, default=(), help="comma-separated schema.table globs not to")
    option(
        "--key",
        type=keys,
        default={},
        help="key columns of tables without a primary key: schema.table=col1,col2;other=col",
    )
    option(
        "--publication",
        default="changebroker",
        help="the changeserver's publication: its selected tables get an initial snapshot",
    )
    option("--snapshot-chunk", type=int, default=10_000, help="snapshot rows read at once")
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
    option(
        "--commit-interval-ms",
        type=int,
        default=0,
        help="a Kafka transaction starts at most this often, the changes read meanwhile in"
        " the next: less Kafka CPU under many small database transactions, for latency"
        " (0: as soon as the one before ended)",
    )
    config.add_replication_options(parser)
    auth.add_options(parser)
    auth.add_client_options(parser)
    option(
        "--admin-scope",
        default=DEFAULT_ADMIN_SCOPE,
        help="token scope resuming a unit and asking a snapshot need (auth on)",
    )
    http.add_server_options(parser)
    commands = parser.add_subparsers(dest="bridge_command")
    snapshot = commands.add_parser(
        "snapshot", help="ask the running bridge (--host, --port) to publish TABLE again"
    )
    snapshot.add_argument("table", help="schema.table")


def settings_of(args: argparse.Namespace) -> Settings:
    """The options of a field's name, and those named otherwise."""
    return config.from_args(
        Settings,
        args,
        meta_dsn=args.meta_pg_url,
        app_dsn=args.pg_url,
        keys=args.key,
        client_token=args.client_token or None,
        ca_file=args.tls_ca,
    )


def create_app(
    bridge: Bridge,
    authenticator: auth.Authenticator | None = None,
    admin_scope: str = DEFAULT_ADMIN_SCOPE,
) -> ASGIApp:
    def lifespan(app: Starlette) -> AbstractAsyncContextManager[None]:
        return tasks.running(bridge.run())

    async def health(request: Request) -> Response:
        if not bridge.ready.is_set():
            return JSONResponse({"status": "STARTING"}, status_code=503)
        stopped, refused = bridge.stopped, bridge.refused
        status = "DEGRADED" if stopped or refused else "OK"
        return JSONResponse({"status": status, "stopped": stopped, "refused": refused})

    async def status(request: Request) -> Response:
        return JSONResponse(bridge.status())

    async def resume(request: Request) -> Response:
        unit = request.path_params["unit"]
        body = await request.json() if await request.body() else {}
        if not bridge.resume(unit, body.get("event_type")):
            return JSONResponse({"detail": f"{unit} is not stopped"}, status_code=404)
        return JSONResponse({"resumed": unit})

    async def snapshot(request: Request) -> Response:
        table = request.path_params["unit"]
        try:
            run = await bridge.request_snapshot(table)
        except LookupError as exc:
            return JSONResponse({"detail": str(exc)}, status_code=404)
        return JSONResponse({"table": table, "snapshot": run}, status_code=202)

    app = Starlette(
        routes=[
            Route("/health", health),
            Route("/status", status),
            metrics.route([BridgeCollector(bridge.status)]),
            Route("/units/{unit}/resume", resume, methods=["POST"]),
            Route("/units/{unit}/snapshot", snapshot, methods=["POST"]),
        ],
        lifespan=lifespan,
    )

    def refuse(status: int, message: str) -> Response:
        return JSONResponse({"detail": message}, status_code=status)

    return auth.AuthMiddleware(
        app,
        authenticator or auth.Off(),
        refuse,
        open_paths=frozenset({"/health"}),
        scopes=auth.ScopeTable(
            (
                auth.rule("GET", "/status|/metrics", None),
                auth.rule("POST", r"/units/[^/]+/(resume|snapshot)", admin_scope),
            ),
            strictest=admin_scope,
        ),
    )


def ask_snapshot(args: argparse.Namespace) -> int:
    scheme = "https" if args.tls_cert else "http"
    url = f"{scheme}://{args.host}:{args.port}/units/{args.table}/snapshot"
    try:
        response = httpx.post(
            url,
            timeout=30,
            headers=auth.client_headers(args.client_token),
            verify=auth.client_verify(args.tls_ca),
        )
    except httpx.HTTPError as exc:
        print(f"no bridge answers at {url}: {exc}", file=sys.stderr)
        return 1
    if response.status_code != 202:
        print(response.json().get("detail", response.text), file=sys.stderr)
        return 1
    body = response.json()
    print(f"snapshot {body['snapshot']} of {body['table']} started: see changebroker status")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.bridge_command == "snapshot":
        return ask_snapshot(args)
    missing = [flag for flag in ("pg_url", "meta_pg_url") if not getattr(args, flag)]
    if missing:
        flags = ", ".join("--" + flag.replace("_", "-") for flag in missing)
        print(f"changebroker bridge: {flags} required", file=sys.stderr)
        return 2
    bridge = Bridge(settings_of(args))
    log.info("bridge starting", extra=logs.fields(port=args.port, name=args.name))
    authenticator = auth.start(auth.AuthSettings.from_args(args), SCOPE)
    app = create_app(bridge, authenticator, args.admin_scope)
    http.tune_gc()
    http.serve(app, args.host, args.port, tls=http.tls_of(args), limits=http.limits_of(args))
    return 0
