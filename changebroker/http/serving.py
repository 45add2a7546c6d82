"""Serving an app with uvicorn, one process: the settings every service uses, its options,
and ``serve`` until SIGTERM/SIGINT, drained."""

from __future__ import annotations

import argparse
from typing import Any

import uvicorn
from starlette.types import ASGIApp

from changebroker.http.draining import DrainingServer
from changebroker.http.flow import FlowIdMiddleware
from changebroker.http.garbage import freeze_startup_objects
from changebroker.http.limits import DEFAULT_LIMITS, ConnectionLimits, add_limit_options
from changebroker.http.tls import Tls, add_tls_options


def add_server_options(parser: argparse.ArgumentParser) -> None:
    """What every service's HTTP server takes: TLS and the limits on its clients."""
    add_tls_options(parser)
    add_limit_options(parser)


def config(
    app: ASGIApp | str,
    host: str,
    port: int,
    *,
    tls: Tls | None = None,
    limits: ConnectionLimits = DEFAULT_LIMITS,
    **options: Any,
) -> uvicorn.Config:
    """uvicorn's settings for every service (``options``: lifespan, graceful timeout, ...);
    ``app`` named by its import string is a worker's, which adds the flow-id middleware itself."""
    settings = _uvicorn_settings(tls, limits) | options
    served = app if isinstance(app, str) else FlowIdMiddleware(app)
    return uvicorn.Config(served, host=host, port=port, **settings)


def _uvicorn_settings(tls: Tls | None, limits: ConnectionLimits) -> dict[str, Any]:
    return {
        "http": limits.protocol(),
        "timeout_keep_alive": int(limits.idle_timeout) or 1,
        "ws": "none",  # no service serves WebSockets: their upgrades are ignored too
        "log_config": None,
        "access_log": False,
        **(tls.uvicorn_options() if tls is not None else {}),
    }


def serve(
    app: ASGIApp,
    host: str,
    port: int,
    *,
    tls: Tls | None = None,
    limits: ConnectionLimits = DEFAULT_LIMITS,
) -> None:
    """Run ``app`` with uvicorn until SIGTERM/SIGINT (graceful: open requests finish, streams
    end after their current batch: ``draining``)."""
    server_config = config(app, host, port, tls=tls, limits=limits, timeout_graceful_shutdown=10)
    freeze_startup_objects()
    DrainingServer(server_config).run()
