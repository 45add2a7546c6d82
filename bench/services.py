"""Where a benchmark's Postgres and Kafka are: the local stack's, the one ``python -m bench``
starts; ``CHANGEBROKER_PG_DSN`` and ``CHANGEBROKER_KAFKA_BOOTSTRAP`` name others."""

from __future__ import annotations

from changebroker.stack.local import LocalStack, Ports
from changebroker.stack.state import StateDir, default_state_dir


def local_stack() -> LocalStack:
    return LocalStack.from_env(StateDir(default_state_dir()), Ports())


def pg_server_dsn() -> str:
    """A DSN of the Postgres server benchmarks make their scratch databases on."""
    return local_stack().pg_dsn


def kafka_bootstrap() -> str:
    return local_stack().kafka_bootstrap
