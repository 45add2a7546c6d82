"""The manual's example event type (``docs/specs/nakadi-manual.txt``): order_received, a
business event keyed by ``order_number``. The chaos workload publishes it; the tests create it."""

from __future__ import annotations

from typing import Any


def order_received(name: str, owning_application: str, partitions: int = 1) -> dict[str, Any]:
    """The body that creates it as ``name``, of ``partitions`` partitions."""
    return {
        "name": name,
        "owning_application": owning_application,
        "category": "business",
        "partition_strategy": "hash",
        "partition_key_fields": ["order_number"],
        "enrichment_strategies": ["metadata_enrichment"],
        "default_statistic": {
            "messages_per_minute": 1000,
            "message_size": 5,
            "read_parallelism": partitions,
            "write_parallelism": partitions,
        },
        "schema": {
            "type": "json_schema",
            "schema": '{ "properties": { "order_number": { "type": "string" } } }',
        },
    }
