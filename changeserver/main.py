"""``changebroker changeserver``: flags, and serving the API and management ports."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import uvicorn
from starlette.types import ASGIApp

from changebroker import auth, config, http
from changebroker.changeserver.server import (
    DEFAULT_ADMIN_SCOPE,
    DEFAULT_READ_SCOPE,
    ChangeServer,
    Settings,
)
from changebroker.state import default_snapshots_dir

SCOPE = "changeserver"


def configure(parser: argparse.ArgumentParser) -> None:
    option = config.service_options(parser, SCOPE, config.DEFAULT_CHANGESERVER_PORT)
    option(
        "--pg-url",
        env="CHANGEBROKER_PG_DSN",
        required=True,
        help="DSN of the database whose changes are served",
    )
    option("--slot", default="changebroker", help="logical replication slot")
    option(
        "--db-dir",
        type=Path,
        required=True,
        help="directory of the change log (SQLite)",
    )
    option(
        "--mgmt-port",
        type=int,
        default=None,
        help="port for /health /ready /markdown /metrics /status (default: the API port)",
    )
    option(
        "--publication",
        default=None,
        help="publication to stream (default: named after the slot, FOR ALL TABLES if missing)",
    )
    option(
        "--tables",
        type=_table_list,
        default=(),
        help="comma-separated tables for a publication we create (default: FOR ALL TABLES)",
    )
    option(
        "--max-age",
        type=config.parse_duration,
        default=None,
        help="retention: drop changes older than this (e.g. 24h); default keep all",
    )
    option(
        "--group-commit-ms",
        type=int,
        default=10,
        help="a change log write waits up to this long after the one before for more"
        " transactions to share its fsync (0: each write as soon as the stream pauses)",
    )
    option(
        "--selector-column",
        default="_change_selector",
        help="column whose value is a change's selector",
    )
    option(
        "--on-slot-loss",
        type=_slot_loss_policy,
        default="fail",
        help="when the replication slot is dropped or invalidated: fail (stop, /health 503)"
        " or recreate (a new slot; readers of older positions get SNAPSHOT_TOO_OLD)",
    )
    option("--prefix", default="", help="path prefix for /changes")
    option(
        "--metrics-interval",
        type=config.parse_duration,
        default=10.0,
        help="longest the slot's and change log's numbers in /metrics and /status may be old",
    )
    option(
        "--snapshots-dir",
        type=Path,
        default=default_snapshots_dir(),
        help="the replay's snapshots, served at /snapshots",
    )
    option(
        "--seed-from",
        type=_url_list,
        default=(),
        help="comma-separated management URLs of a fleet's other servers: a new change log"
        " (or one whose slot a markdown dropped) is seeded from one of them before serving",
    )
    option(
        "--seed-timeout",
        type=config.parse_duration,
        default=60.0,
        help="how long to wait for a peer that can seed before the change log starts at the"
        " new slot (positions before it are then SNAPSHOT_TOO_OLD here)",
    )
    auth.add_options(parser)
    auth.add_client_options(parser)
    option(
        "--read-scope",
        default=DEFAULT_READ_SCOPE,
        help="token scope /changes and /snapshots need (auth on)",
    )
    option(
        "--admin-scope",
        default=DEFAULT_ADMIN_SCOPE,
        help="token scope /markdown and the stack dump need (auth on)",
    )
    http.add_server_options(parser)


def _slot_loss_policy(text: str) -> str:
    if text not in ("fail", "recreate"):
        raise argparse.ArgumentTypeError(f"invalid policy {text!r}: use fail or recreate")
    return text


def _table_list(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _url_list(text: str) -> tuple[str, ...]:
    urls = _table_list(text)
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise argparse.ArgumentTypeError(f"invalid peer URL {url!r}: use http:// or https://")
    return urls


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: ``_serve`` stops both servers together."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _server(
    app: ASGIApp, port: int, lifespan: Literal["on", "off"], args: argparse.Namespace
) -> _Server:
    return _Server(
        http.config(
            app,
            args.host,
            port,
            tls=http.tls_of(args),
            limits=http.limits_of(args),
            lifespan=lifespan,
            timeout_graceful_shutdown=10,
        )
    )


async def _serve(changeserver: ChangeServer, args: argparse.Namespace) -> None:
    servers = [_server(changeserver.api_app, args.port, "on", args)]
    if changeserver.management_app is not None:
        servers.append(_server(changeserver.management_app, args.mgmt_port, "off", args))

    def stop() -> None:
        # Long polls answer now with what they have, rather than be cut at the graceful
        # timeout: a client's next request (elsewhere, or after a restart) goes on from there.
        http.draining.set()
        changeserver.replicator.stop()  # and any seeding under way
        changeserver.state.waiters.wake_all()
        for server in servers:
            server.should_exit = True

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop)
    await asyncio.gather(*(s.serve() for s in servers))


def run(args: argparse.Namespace) -> int:
    settings = config.from_args(Settings, args, dsn=args.pg_url)
    changeserver = ChangeServer(
        settings,
        separate_management=args.mgmt_port is not None,
        authenticator=auth.start(auth.AuthSettings.from_args(args), SCOPE),
        read_scope=args.read_scope,
        admin_scope=args.admin_scope,
    )
    asyncio.run(_serve(changeserver, args))
    return 0
