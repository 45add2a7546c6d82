"""``changebroker console``: the web console, reaching every service through its HTTP API."""

from __future__ import annotations

import argparse
import logging

from changebroker import auth, config, http, logs
from changebroker.console import login
from changebroker.console.app import create_app
from changebroker.console.upstream import Endpoints

log = logging.getLogger(__name__)

SCOPE = "console"


def configure(parser: argparse.ArgumentParser) -> None:
    option = config.service_options(parser, SCOPE, config.DEFAULT_CONSOLE_PORT)
    loopback = "http://127.0.0.1"
    option("--broker-url", default=f"{loopback}:{config.DEFAULT_BROKER_PORT}", help="the broker")
    option(
        "--registry-url",
        default=f"{loopback}:{config.DEFAULT_REGISTRY_PORT}",
        help="the schema registry",
    )
    option(
        "--changeserver-url",
        default=f"{loopback}:{config.DEFAULT_CHANGESERVER_PORT}",
        help="the changeserver's /changes API",
    )
    option(
        "--changeserver-mgmt-url",
        default=f"{loopback}:{config.DEFAULT_CHANGESERVER_MGMT_PORT}",
        help="the changeserver's management API (/health /ready /markdown); a fleet's"
        " servers' comma-separated, the first shown on the overview",
    )
    option(
        "--bridge-url",
        default=f"{loopback}:{config.DEFAULT_BRIDGE_PORT}",
        help="the bridge's /health /status and resume API",
    )
    config.add_switch(
        parser,
        "--read-only",
        scope=SCOPE,
        help="show only: no publishing, cursor resets, mark down or resume",
    )
    option(
        "--sample-interval",
        type=config.parse_duration,
        default=15.0,
        help="how often lag is sampled for the charts and the overview",
    )
    option(
        "--keep",
        type=config.parse_duration,
        default=3 * 3600.0,
        help="how long lag samples are kept (in memory)",
    )
    # Operators sign in with a token checked as the services check theirs.
    auth.add_options(parser)
    option(
        "--read-scope",
        default=login.DEFAULT_READ_SCOPE,
        help="token scope an operator needs to see the pages (auth on)",
    )
    option(
        "--admin-scope",
        default=login.DEFAULT_ADMIN_SCOPE,
        help="token scope an operator needs to act: publish, reset, mark down, resume (auth on)",
    )
    # The console is a client of every service: it sends their token and trusts their CA.
    auth.add_client_options(parser)
    http.add_server_options(parser)


def endpoints_of(args: argparse.Namespace) -> Endpoints:
    fleet = tuple(url.strip().rstrip("/") for url in args.changeserver_mgmt_url.split(","))
    return Endpoints(
        broker=args.broker_url.rstrip("/"),
        registry=args.registry_url.rstrip("/"),
        changeserver=args.changeserver_url.rstrip("/"),
        changeserver_mgmt=fleet[0],
        changeserver_fleet=fleet if len(fleet) > 1 else (),
        bridge=args.bridge_url.rstrip("/"),
        token=args.client_token or None,
        ca_file=args.tls_ca,
    )


def run(args: argparse.Namespace) -> int:
    app = create_app(
        endpoints_of(args),
        read_only=args.read_only,
        sample_interval=args.sample_interval,
        keep_seconds=args.keep,
        authenticator=auth.start(auth.AuthSettings.from_args(args), "console"),
        read_scope=args.read_scope,
        admin_scope=args.admin_scope,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    log.info(
        "console starting",
        extra=logs.fields(host=args.host, port=args.port, read_only=args.read_only),
    )
    http.serve(app, args.host, args.port, tls=http.tls_of(args), limits=http.limits_of(args))
    return 0
