"""``changebroker registry``: the OpenSchema registry service."""

from __future__ import annotations

import argparse
import json
import logging
import os
from typing import Any

from starlette.types import ASGIApp

from changebroker import auth, config, http, logs
from changebroker.registry.app import MAX_BODY_BYTES, Scopes, create_app

# How the parent hands its settings to worker processes (--workers above 1).
SETTINGS_ENV = "CHANGEBROKER_REGISTRY_WORKER_SETTINGS"

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    option = config.service_options(parser, "registry", config.DEFAULT_REGISTRY_PORT)
    option("--pg-url", required=True, help="Postgres DSN of the registry's metadata database")
    auth.add_options(parser)
    option("--read-scope", default="registry.read", help="token scope reads need (auth on)")
    option("--write-scope", default="registry.write", help="token scope writes need (auth on)")
    http.add_server_options(parser)
    option(
        "--statement-timeout",
        type=config.parse_duration,
        default=10.0,
        help="longest a storage call may take before the API answers 50002",
    )
    option("--pool-size", type=int, default=10, help="Postgres connections at most (per worker)")
    option(
        "--max-body-bytes",
        type=int,
        default=MAX_BODY_BYTES,
        help="largest request body (a schema): larger ones are refused with 41301",
    )
    option(
        "--workers",
        type=int,
        default=1,
        help="processes serving the port (each answers from its own memory, dropped on any"
        " change by Postgres's notification); one per core scales lookups",
    )


def run(args: argparse.Namespace) -> int:
    auth_settings = auth.AuthSettings.from_args(args)
    auth.start(auth_settings, "registry")
    tls, limits = http.tls_of(args), http.limits_of(args)
    settings: dict[str, Any] = {
        "dsn": args.pg_url,
        "auth": auth_settings.to_json(),
        "scopes": {"read": args.read_scope, "write": args.write_scope},
        "statement_timeout_ms": int(args.statement_timeout * 1000),
        "pool_size": args.pool_size,
        "max_body_bytes": args.max_body_bytes,
    }
    log.info(
        "registry starting",
        extra=logs.fields(host=args.host, port=args.port, workers=args.workers),
    )
    if args.workers <= 1:
        http.serve(_app(settings), args.host, args.port, tls=tls, limits=limits)
        return 0
    # Workers share nothing but Postgres, as separate registry processes do.
    os.environ[SETTINGS_ENV] = json.dumps(settings)
    http.serve_workers("changebroker.registry.main:worker_app", args)
    return 0


def worker_app() -> ASGIApp:
    """The app of one worker process, from the settings its parent left in the environment."""
    logs.configure("registry")
    http.drain_in_worker()
    return http.FlowIdMiddleware(_app(json.loads(os.environ[SETTINGS_ENV])))


def _app(settings: dict[str, Any]) -> ASGIApp:
    """The registry app from the JSON settings ``run`` made (the same in every worker)."""
    return create_app(
        settings["dsn"],
        authenticator=auth.AuthSettings.from_json(settings["auth"]).authenticator(),
        scopes=Scopes(**settings["scopes"]),
        statement_timeout_ms=settings["statement_timeout_ms"],
        pool_size=settings["pool_size"],
        max_body_bytes=settings["max_body_bytes"],
    )
