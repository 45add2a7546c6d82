"""Settings from flags and environment variables, one way for every service.

Every flag of every service has an environment variable of the same name
(``--max-age`` of the changeserver is ``CHANGEBROKER_CHANGESERVER_MAX_AGE``),
so containers and CI configure by environment and people by flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

SettingsT = TypeVar("SettingsT", bound="DataclassInstance")

ENV_PREFIX = "CHANGEBROKER_"

# The local stack's default ports (README lists them; flags and env vars move each).
DEFAULT_PG_PORT = 55432
DEFAULT_KAFKA_PORT = 9092
DEFAULT_BROKER_PORT = 8080
DEFAULT_REGISTRY_PORT = 8081
DEFAULT_CHANGESERVER_PORT = 9000
DEFAULT_CHANGESERVER_MGMT_PORT = 9001
DEFAULT_BRIDGE_PORT = 9002
DEFAULT_CONSOLE_PORT = 8088
# The application data the changeserver publishes, and our own metadata (broker, registry),
# in separate databases: our metadata writes must never show up as changes.
DEFAULT_DATABASE = "changebroker"
DEFAULT_META_DATABASE = "changebroker_meta"


def env_name(scope: str, flag: str) -> str:
    """``("changeserver", "--max-age")`` -> ``CHANGEBROKER_CHANGESERVER_MAX_AGE``."""
    parts = [scope, flag.lstrip("-")] if scope else [flag.lstrip("-")]
    return ENV_PREFIX + "_".join(p.upper().replace("-", "_") for p in parts)


def add_option(
    parser: argparse.ArgumentParser,
    flag: str,
    *,
    scope: str,
    default: Any = None,
    type: Callable[[str], Any] = str,
    help: str,
    env: str | None = None,
    required: bool = False,
) -> None:
    """Add ``flag`` whose default comes from its environment variable, then ``default``."""
    variable = env or env_name(scope, flag)
    raw = os.environ.get(variable)
    value = type(raw) if raw not in (None, "") else default
    parser.add_argument(
        flag,
        default=value,
        type=type,
        required=required and value is None,
        help=f"{help} [env {variable}; default {value!r}]",
    )


def options(parser: argparse.ArgumentParser, scope: str) -> Callable[..., None]:
    """``option("--port", type=int, default=8080, help=...)``: :func:`add_option` in ``scope``."""

    def option(flag: str, **kwargs: Any) -> None:
        add_option(parser, flag, scope=scope, **kwargs)

    return option


def service_options(parser: argparse.ArgumentParser, scope: str, port: int) -> Callable[..., None]:
    """:func:`options` for an HTTP service, with its ``--host`` and ``--port`` added."""
    option = options(parser, scope)
    option("--host", default="127.0.0.1", help="address to listen on")
    option("--port", type=int, default=port, help="port to listen on")
    return option


def from_args(cls: type[SettingsT], args: argparse.Namespace, **given: Any) -> SettingsT:
    """The settings dataclass ``cls``: the fields in ``given``, each other one from the option
    of its name (a field no option names keeps its default)."""
    names = [f.name for f in dataclasses.fields(cls) if f.name not in given]
    return cls(**given, **{name: getattr(args, name) for name in names if hasattr(args, name)})


def add_switch(parser: argparse.ArgumentParser, flag: str, *, scope: str, help: str) -> None:
    """An on/off ``flag``, also on when its environment variable is true, yes, on or 1."""
    variable = env_name(scope, flag)
    on = os.environ.get(variable, "").strip().lower() in ("1", "true", "yes", "on")
    parser.add_argument(flag, action="store_true", default=on, help=f"{help} [env {variable}]")


def add_replication_options(parser: argparse.ArgumentParser) -> None:
    """``--replication-factor`` and ``--min-insync-replicas`` of the topics a service creates;
    one environment variable each for every service, as the cluster is one."""
    add_option(
        parser,
        "--replication-factor",
        scope="",
        type=int,
        env=ENV_PREFIX + "KAFKA_REPLICATION_FACTOR",
        help="copies of each new Kafka topic (default: 3 on a cluster of 3 or more, else 1)",
    )
    add_option(
        parser,
        "--min-insync-replicas",
        scope="",
        type=int,
        env=ENV_PREFIX + "KAFKA_MIN_INSYNC_REPLICAS",
        help="copies a write needs before it is acknowledged (default: the factor - 1, at least 1)",
    )


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str) -> float:
    """Seconds from ``"90"``, ``"250ms"``, ``"30s"``, ``"15m"``, ``"24h"`` or ``"7d"``."""
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: use a number with an optional unit ms, s, m, h or d"
        )
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
