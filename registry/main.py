"""``changebroker registry``: the OpenSchema registry service."""

from __future__ import annotations

import argparse
import logging

from changebroker import config, http, logs
from registry.app import create_app

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
    option("--pool-size", type=int, default=10, help="Postgres connections at most")


def run(args: argparse.Namespace) -> int:
    app = create_app(
        args.pg_url,
        auth_token=args.auth_token or None,
        statement_timeout_ms=int(args.statement_timeout * 1000),
        pool_size=args.pool_size,
    )
    log.info("registry starting", extra=logs.fields(host=args.host, port=args.port))
    http.serve(app, args.host, args.port)
    return 0
