"""Event type bodies the tests create."""

from __future__ import annotations

import uuid
from typing import Any

from changebroker.broker.event_types.examples import order_received


def business_event_type(name: str, **overrides: Any) -> dict[str, Any]:
    """The manual's order_received event type, renamed."""
    return {**order_received(name, "acme-order-service"), **overrides}


def order_events(count: int) -> list[dict[str, Any]]:
    """``count`` events of :func:`business_event_type`, each with an eid of its own."""
    return [
        {
            "order_number": uuid.uuid4().hex[:8],
            "metadata": {"eid": str(uuid.uuid4()), "occurred_at": "2026-11-23T10:00:00Z"},
        }
        for _ in range(count)
    ]
