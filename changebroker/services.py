"""The project's own services: name -> the module whose ``configure``/``run`` the CLI calls."""

from __future__ import annotations

SERVICE_MODULES: dict[str, tuple[str, str]] = {
    "changeserver": (
        "changebroker.changeserver.main",
        "tail Postgres logical replication, serve /changes",
    ),
    "registry": ("changebroker.registry.main", "the OpenSchema schema registry"),
    "broker": ("changebroker.broker.main", "the Nakadi-compatible event broker on Kafka"),
    "bridge": (
        "changebroker.bridge.main",
        "publish every row change from /changes as data events",
    ),
    "console": (
        "changebroker.console.main",
        "the operator's web console over every service's HTTP API",
    ),
}

# Commands that run once and end (not started by ``up``), with the same configure/run shape.
JOB_MODULES: dict[str, tuple[str, str]] = {
    "replay": (
        "changebroker.replay.main",
        "replay the data events into a Parquet snapshot (Spark)",
    ),
}
