"""Event type bodies the tests create."""

from __future__ import annotations

import uuid
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


def order_events(count: int) -> list[dict[str, Any]]:
    """``count`` events of :func:`business_event_type`, each with an eid of its own."""
    return [
        {
            "order_number": uuid.uuid4().hex[:8],
            "metadata": {"eid": str(uuid.uuid4()), "occurred_at": "2026-11-23T10:00:00Z"},
        }
        for _ in range(count)
    ]
