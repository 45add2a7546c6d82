"""The project's own services: name -> the module whose ``configure``/``run`` the CLI calls."""

from __future__ import annotations

import importlib.util

SERVICE_MODULES: dict[str, tuple[str, str]] = {
    "changeserver": ("changeserver.main", "tail Postgres logical replication, serve /changes"),
    "registry": ("registry.main", "the OpenSchema schema registry"),
    "broker": ("broker.main", "the Nakadi-compatible event broker on Kafka"),
}


def available() -> dict[str, tuple[str, str]]:
    """The services whose module is present (they land one issue at a time)."""
    return {
        name: entry
        for name, entry in SERVICE_MODULES.items()
        if importlib.util.find_spec(entry[0]) is not None
    }
