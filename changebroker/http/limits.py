"""What a slow or abusive client may hold of a server: the limit options and the protocol
class that enforces them."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from changebroker.config import add_option, parse_duration
from changebroker.http.protocol import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_MAX_HEADER_BYTES,
    UpgradeIgnoringProtocol,
)

DEFAULT_IDLE_TIMEOUT = 5.0  # uvicorn's keep-alive default


@dataclass(frozen=True)
class ConnectionLimits:
    """How long and how large a request's head may be, and how long an idle connection stays."""

    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT

    def protocol(self) -> type[UpgradeIgnoringProtocol]:
        limits = {
            "header_timeout": self.header_timeout,
            "max_header_bytes": self.max_header_bytes,
            "body_timeout": self.body_timeout,
        }
        if limits == {name: getattr(UpgradeIgnoringProtocol, name) for name in limits}:
            return UpgradeIgnoringProtocol
        return type("LimitedProtocol", (UpgradeIgnoringProtocol,), limits)


DEFAULT_LIMITS = ConnectionLimits()


def add_limit_options(parser: argparse.ArgumentParser) -> None:
    """``--header-timeout``, ``--body-timeout``, ``--max-header-bytes``, ``--idle-timeout``:
    what a slow or abusive client may hold of a server."""
    add_option(
        parser,
        "--header-timeout",
        scope="",
        type=parse_duration,
        default=DEFAULT_HEADER_TIMEOUT,
        help="a request's head must arrive within this (else 408 and the connection closes)",
    )
    add_option(
        parser,
        "--body-timeout",
        scope="",
        type=parse_duration,
        default=DEFAULT_BODY_TIMEOUT,
        help="a request's body must arrive within this of its head (else 408 and the"
        " connection closes)",
    )
    add_option(
        parser,
        "--max-header-bytes",
        scope="",
        type=int,
        default=DEFAULT_MAX_HEADER_BYTES,
        help="largest request head, URL and headers (else 431)",
    )
    add_option(
        parser,
        "--idle-timeout",
        scope="",
        type=parse_duration,
        default=DEFAULT_IDLE_TIMEOUT,
        help="an idle keep-alive connection is closed after this",
    )


def limits_of(args: argparse.Namespace) -> ConnectionLimits:
    return ConnectionLimits(
        args.header_timeout, args.max_header_bytes, args.idle_timeout, args.body_timeout
    )
