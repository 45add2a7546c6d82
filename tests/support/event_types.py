"""Event type bodies the tests create."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from broker.event_types.examples import order_received


def business_event_type(name: str, **overrides: Any) -> dict[str, Any]:
    """The manual's order_received event type, renamed."""
    return {**order_received(name, "acme-order-service"), **overrides}


def data_event_type(
    name: str, schema: Mapping[str, Any], key: Sequence[str], partitions: int
) -> dict[str, Any]:
    """A data event type as the bridge makes one: hash on ``key`` over ``partitions``, or,
    without a key, ``random`` (what an older bridge made of a table without a primary key)."""
    body: dict[str, Any] = {
        "name": name,
        "owning_application": "replay-test",
        "category": "data",
        "enrichment_strategies": ["metadata_enrichment"],
        "partition_strategy": "hash" if key else "random",
        "schema": {"type": "json_schema", "schema": json.dumps(schema)},
        "default_statistic": {
            "messages_per_minute": 1,
            "message_size": 100,
            "read_parallelism": partitions,
            "write_parallelism": partitions,
        },
    }
    if key:
        body["partition_key_fields"] = list(key)
    return body


def order_events(count: int) -> list[dict[str, Any]]:
    """``count`` events of :func:`business_event_type`, each with an eid of its own."""
    return [
        {
            "order_number": uuid.uuid4().hex[:8],
            "metadata": {"eid": str(uuid.uuid4()), "occurred_at": "2026-11-23T10:00:00Z"},
        }
        for _ in range(count)
    ]
