"""Event type bodies the tests create."""

from __future__ import annotations

from typing import Any


def business_event_type(name: str, **overrides: Any) -> dict[str, Any]:
    """The manual's order_received event type (docs/specs/nakadi-manual.txt), renamed."""
    return {
        "name": name,
        "owning_application": "acme-order-service",
        "category": "business",
        "partition_strategy": "hash",
        "partition_key_fields": ["order_number"],
        "enrichment_strategies": ["metadata_enrichment"],
        "default_statistic": {
            "messages_per_minute": 1000,
            "message_size": 5,
            "read_parallelism": 1,
            "write_parallelism": 1,
        },
        "schema": {
            "type": "json_schema",
            "schema": '{ "properties": { "order_number": { "type": "string" } } }',
        },
        **overrides,
    }
