"""``changebroker registry``: the OpenSchema registry service."""

from __future__ import annotations

import argparse
import logging

from changebroker import auth, config, http, logs
from registry.app import MAX_BODY_BYTES, Scopes, create_app

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    def option(flag: str, **kwargs: object) -> None:
        config.add_option(parser, flag, scope="registry", **kwargs)  # type: ignore[arg-type]

    option("--host", default="127.0.0.1", help="address to listen on")
    option("--port", type=int, default=config.DEFAULT_REGISTRY_PORT, help="port to listen on")
    option("--pg-url", required=True, help="Postgres DSN of the registry's metadata database")
    auth.add_options(parser)
    option("--read-scope", default="registry.read", help="token scope reads need (auth on)")
    option("--write-scope", default="registry.write", help="token scope writes need (auth on)")
    http.add_tls_options(parser)
    http.add_limit_options(parser)
    option(
        "--statement-timeout",
        type=config.parse_duration,
        default=10.0,
        help="longest a storage call may take before the API answers 50002",
    )
    option("--pool-size", type=int, default=10, help="Postgres connections at most")
    option(
        "--max-body-bytes",
        type=int,
        default=MAX_BODY_BYTES,
        help="largest request body (a schema): larger ones are refused with 41301",
    )


def run(args: argparse.Namespace) -> int:
    tls = http.tls_of(args)
    app = create_app(
        args.pg_url,
        authenticator=auth.start(auth.AuthSettings.from_args(args), "registry"),
        scopes=Scopes(read=args.read_scope, write=args.write_scope),
        statement_timeout_ms=int(args.statement_timeout * 1000),
        pool_size=args.pool_size,
        max_body_bytes=args.max_body_bytes,
    )
    log.info("registry starting", extra=logs.fields(host=args.host, port=args.port))
    http.serve(app, args.host, args.port, tls=tls, limits=http.limits_of(args))
    return 0
