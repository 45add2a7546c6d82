"""``changebroker registry``: the OpenSchema registry service."""

from __future__ import annotations

import argparse
import json
import logging
import os
from typing import Any

import uvicorn
from starlette.types import ASGIApp

from changebroker import config, http, logs
from registry.app import create_app

# How the parent hands its settings to worker processes (--workers above 1).
SETTINGS_ENV = "CHANGEBROKER_REGISTRY_WORKER_SETTINGS"

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    option = config.service_options(parser, "registry", config.DEFAULT_REGISTRY_PORT)
    option("--pg-url", required=True, help="Postgres DSN of the registry's metadata database")
    option(
        "--auth-token",
        help="when set, every call but /health needs 'Authorization: Bearer <token>'",
    )
    option(
        "--statement-timeout",
        type=config.parse_duration,
        default=10.0,
        help="longest a storage call may take before the API answers 50002",
    )
    option("--pool-size", type=int, default=10, help="Postgres connections at most (per worker)")
    option(
        "--workers",
        type=int,
        default=1,
        help="processes serving the port (each answers from its own memory, dropped on any"
        " change by Postgres's notification); one per core scales lookups",
    )


def run(args: argparse.Namespace) -> int:
    settings: dict[str, Any] = {
        "dsn": args.pg_url,
        "auth_token": args.auth_token or None,
        "statement_timeout_ms": int(args.statement_timeout * 1000),
        "pool_size": args.pool_size,
    }
    log.info(
        "registry starting",
        extra=logs.fields(host=args.host, port=args.port, workers=args.workers),
    )
    if args.workers <= 1:
        http.serve(create_app(**settings), args.host, args.port)
        return 0
    # Workers share nothing but Postgres, as separate registry processes do.
    os.environ[SETTINGS_ENV] = json.dumps(settings)
    uvicorn.run(
        "registry.main:worker_app",
        factory=True,
        workers=args.workers,
        host=args.host,
        port=args.port,
        http=http.UpgradeIgnoringProtocol,
        ws="none",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=10,
    )
    return 0


def worker_app() -> ASGIApp:
    """The app of one worker process, from the settings its parent left in the environment."""
    logs.configure("registry")
    return http.FlowIdMiddleware(create_app(**json.loads(os.environ[SETTINGS_ENV])))
