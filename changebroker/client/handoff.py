"""From a replay snapshot to the live stream: a Nakadi subscription that starts exactly
after the snapshot (replay/README.md "Handoff to the live stream").

The manifest's cursors name, per event type and partition, the last event the snapshot
holds; a subscription with ``read_from: cursors`` and those cursors streams exactly the
events after them. A consumer loads the snapshot's tables, then consumes the subscription.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from changebroker.client.backoff import Backoff, Endpoints, base_urls, exchange
from changebroker.client.effects import Call, Effect
from changebroker.client.errors import SubscriptionRefused
from changebroker.client.wire import Refusal

MANIFEST = "manifest.json"
PATIENCE = 60.0  # seconds of failed attempts before creating a subscription gives up

# A snapshot's directory, its manifest.json, or the manifest as read.
ManifestSource = str | os.PathLike[str] | Mapping[str, Any]


def load_manifest(manifest: ManifestSource) -> Mapping[str, Any]:
    if isinstance(manifest, Mapping):
        return manifest
    path = Path(manifest)
    if path.is_dir():
        path = path / MANIFEST
    try:
        loaded: Mapping[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise SubscriptionRefused(
            f"{path} does not exist: give a snapshot's directory or its {MANIFEST}"
        ) from None
    return loaded


def subscription_body(
    manifest: Mapping[str, Any], owning_application: str, consumer_group: str | None
) -> dict[str, Any]:
    cursors: Mapping[str, list[Mapping[str, str]]] = manifest.get("cursors") or {}
    if not cursors:
        raise SubscriptionRefused(f"snapshot {manifest.get('snapshot_id')} holds no event types")
    return {
        "owning_application": owning_application,
        "event_types": sorted(cursors),
        # One subscription per snapshot unless asked otherwise: Nakadi answers an existing
        # (application, event types, group) with that subscription, whatever its cursors.
        "consumer_group": consumer_group or f"snapshot-{manifest['snapshot_id']}",
        "read_from": "cursors",
        "initial_cursors": [
            {"event_type": event_type, **cursor}
            for event_type, each in sorted(cursors.items())
            for cursor in each
        ],
    }


def create(
    urls: str | Sequence[str],
    manifest: ManifestSource,
    owning_application: str,
    consumer_group: str | None,
    backoff: Backoff | None,
) -> Generator[Effect, Any, str]:
    """``POST /subscriptions``: the id of a subscription starting right after the snapshot,
    checked to start there (an existing one of the same group may start elsewhere)."""
    body = subscription_body(load_manifest(manifest), owning_application, consumer_group)
    endpoints = Endpoints(base_urls(urls))
    deadline = time.monotonic() + PATIENCE
    answer = yield from exchange(
        lambda base: Call("POST", base + "/subscriptions", (), {}, body),
        endpoints,
        backoff or Backoff(),
        lambda: time.monotonic() > deadline,
    )
    if answer is None:
        raise SubscriptionRefused(
            f"no broker at {', '.join(endpoints.urls)} answered for {PATIENCE:g} s"
            " (the log says what each attempt got): is it running?"
        )
    if answer.status not in (200, 201):
        raise SubscriptionRefused(
            f"the broker refused the subscription: {Refusal.of(answer.status, answer.body)}"
        )
    found = orjson.loads(answer.body)
    if found.get("initial_cursors") != body["initial_cursors"]:
        raise SubscriptionRefused(
            f"subscription {found['id']} of {body['owning_application']} (group"
            f" {body['consumer_group']}) exists and starts elsewhere: give another consumer"
            " group"
        )
    return str(found["id"])
