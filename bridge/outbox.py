"""The outbox: each committed insert into the outbox table (``sql/outbox/``) becomes an
event of the event type it names, validated by that type's schema; each of those event
types is a unit of its own."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from changebroker import kafka
from changebroker.bridge.data_events import eid, occurred_at, row_values
from changebroker.bridge.event_types import EventTypes
from changebroker.bridge.units import UnitStopped, check_writable
from changebroker.broker.publishing.partitioning import java_string_hash
from changebroker.broker.publishing.pipeline import prepare
from changebroker.broker.publishing.producer import Message


def unit_of(change: Mapping[str, Any]) -> str:
    """The unit of an outbox insert: its event type's."""
    return f"outbox:{change['newRow']['event_type']['value']}"


async def outbox_event(
    change: Mapping[str, Any], event_types: EventTypes, cluster: kafka.Cluster, received_at: str
) -> tuple[str, list[Message]]:
    """An outbox insert as an event of its event type, validated by that type's schema.

    Its partition: the event type's strategy; under ``random`` (any partition will do)
    the row's ``partition_key`` picks it, so one key's events keep their commit order.
    """
    row = row_values(change["newRow"])
    name = row["event_type"]
    target = await event_types.target(name)
    if target is None:
        raise UnitStopped(f"outbox event type {name!r} does not exist: create it")
    check_writable(target, cluster)
    event = row["payload"]
    if not isinstance(event, dict):
        raise UnitStopped(f"outbox row {row.get('id')}: payload must be a JSON object")
    key = row.get("partition_key")
    chosen = None
    if key is not None and target.partition_strategy == "random":
        chosen = abs(java_string_hash(str(key))) % target.partitions
    if target.category != "undefined":
        metadata = dict(event.get("metadata") or {})
        metadata.setdefault("eid", eid(f"outbox:{name}/{change['sequence']}"))
        metadata.setdefault("occurred_at", occurred_at(change))
        if chosen is not None:
            metadata["partition"] = str(chosen)
            target = dataclasses.replace(target, partition_strategy="user_defined")
        event = {**event, "metadata": metadata}
    message = prepare(target, event, 0, received_at)
    if chosen is not None and target.category == "undefined":
        message = dataclasses.replace(message, partition=chosen)
    return name, [message]
