"""``metadata_enrichment``: what the broker writes into each event's metadata on the way in.

Nakadi sets ``received_at``, ``event_type``, ``flow_id`` (the request's
X-Flow-Id), ``partition`` and ``version`` (the schema version the event was
validated against), replacing what the producer sent; an ``event_type`` that
names another event type is refused (``EventMetadata`` in
docs/specs/nakadi-event-bus-api-0.10.1.yaml).
"""

from __future__ import annotations

from typing import Any


class EnrichmentError(ValueError):
    """The event cannot be enriched; the message says why."""


def enrich(
    event: dict[str, Any],
    *,
    event_type: str,
    partition: int,
    version: str,
    flow_id: str | None,
    received_at: str,
) -> None:
    metadata = event["metadata"]
    sent = metadata.get("event_type")
    if sent is not None and sent != event_type:
        raise EnrichmentError(
            f"metadata.event_type is {sent!r} but the event was posted to {event_type!r}:"
            " remove it or post to its own event type"
        )
    metadata["received_at"] = received_at
    metadata["event_type"] = event_type
    metadata["partition"] = str(partition)
    metadata["version"] = version
    if flow_id:
        metadata["flow_id"] = flow_id
