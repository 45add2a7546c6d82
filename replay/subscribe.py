"""Handoff to the live stream: a Nakadi subscription that starts exactly after a snapshot.

The manifest's cursors name, per event type and partition, the last event the snapshot
holds; a subscription with ``read_from: cursors`` and those cursors streams exactly the
events after them. A consumer loads the snapshot, then consumes the subscription.
"""

from __future__ import annotations

from typing import Any

import httpx

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
) -> str:
    """The id of a subscription starting right after ``manifest``'s snapshot."""
    if not manifest.cursors:
        raise SubscriptionRefused(f"snapshot {manifest.snapshot_id} holds no event types")
    body = subscription_body(manifest, owning_application, consumer_group)
    response = httpx.post(f"{broker_url}/subscriptions", json=body, timeout=30)
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
