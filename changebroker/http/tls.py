"""TLS options every server (and every client of ours) takes."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from changebroker.config import add_option


@dataclass(frozen=True)
class Tls:
    """A server's certificate chain and key (PEM): the port then speaks HTTPS only."""

    cert: Path
    key: Path

    def uvicorn_options(self) -> dict[str, str]:
        return {"ssl_certfile": str(self.cert), "ssl_keyfile": str(self.key)}


def add_tls_options(parser: argparse.ArgumentParser, *, server: bool = True) -> None:
    """``--tls-cert``/``--tls-key`` (a server's) and ``--tls-ca`` (what our clients trust)."""
    if server:
        for flag, what in [("--tls-cert", "certificate chain"), ("--tls-key", "private key")]:
            add_option(
                parser, flag, scope="", type=Path, help=f"serve HTTPS with this {what} (PEM)"
            )
    add_option(
        parser,
        "--tls-ca",
        scope="",
        type=Path,
        help="CA certificates (PEM) our HTTPS clients trust besides the system's",
    )


def tls_of(args: argparse.Namespace) -> Tls | None:
    """The TLS files the flags name, or None; both or neither must be given."""
    if (args.tls_cert is None) != (args.tls_key is None):
        raise SystemExit("give both --tls-cert and --tls-key, or neither")
    return Tls(args.tls_cert, args.tls_key) if args.tls_cert is not None else None
