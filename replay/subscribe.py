"""Handoff to the live stream: a Nakadi subscription that starts exactly after a snapshot.

The manifest's cursors name, per event type and partition, the last event the snapshot
holds; a subscription with ``read_from: cursors`` and those cursors streams exactly the
events after them. A consumer loads the snapshot, then consumes the subscription.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replay.catalog import broker_client
from replay.snapshots import Manifest


class SubscriptionRefused(Exception):
    pass


def subscription_body(
    manifest: Manifest, owning_application: str, consumer_group: str | None
) -> dict[str, Any]:
    return {
        "owning_application": owning_application,
        "event_types": sorted(manifest.cursors),
        # One subscription per snapshot unless asked otherwise: Nakadi answers an existing
        # (application, event types, group) with that subscription, whatever its cursors.
        "consumer_group": consumer_group or f"snapshot-{manifest.snapshot_id}",
        "read_from": "cursors",
        "initial_cursors": [
            {"event_type": event_type, **cursor}
            for event_type, cursors in sorted(manifest.cursors.items())
            for cursor in cursors
        ],
    }


def subscribe(
    broker_url: str,
    manifest: Manifest,
    owning_application: str,
    consumer_group: str | None = None,
    *,
    token: str | None = None,
    ca_file: Path | None = None,
) -> str:
    """The id of a subscription starting right after ``manifest``'s snapshot."""
    if not manifest.cursors:
        raise SubscriptionRefused(f"snapshot {manifest.snapshot_id} holds no event types")
    body = subscription_body(manifest, owning_application, consumer_group)
    with broker_client(broker_url, token, ca_file) as broker:
        response = broker.post("/subscriptions", json=body)
    if response.status_code not in (200, 201):
        raise SubscriptionRefused(
            f"the broker refused the subscription: {response.status_code} {response.text}"
        )
    found = response.json()
    if found.get("initial_cursors") != body["initial_cursors"]:
        raise SubscriptionRefused(
            f"subscription {found['id']} of {owning_application} (group"
            f" {body['consumer_group']}) exists and starts elsewhere: give another"
            " --consumer-group"
        )
    return str(found["id"])
