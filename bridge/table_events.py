"""Table events as data-change events: after a TRUNCATE or a DROP TABLE, one event in every
partition of the table's event type says that every earlier row of that partition is gone.

A ``D`` whose ``data`` is ``{}`` (a row event always carries its key), ``metadata.flow_id``
``truncate`` or ``drop``, placed in each partition by ``metadata.partition``, all in the
Kafka transaction of the change that brought it, between the events before it and those
after. The Kafka record key is ``TABLE_EVENT_KEY``, which no row has (a row's is the JSON
array of its key values), so the replay finds them without parsing (replay/compaction.py).
"""

from __future__ import annotations

import dataclasses

from changebroker.bridge.event_types import Published
from changebroker.broker.publishing.pipeline import prepare
from changebroker.broker.publishing.producer import Message

TABLE_EVENT_KEY = b"[]"


def ended_rows(
    published: Published,
    table: str,
    eids: list[str],
    flow_id: str,
    occurred_at: str,
    received_at: str,
) -> list[Message]:
    """One table event per partition of ``published`` (``eids``: one per partition)."""
    # Placed by the bridge, not hashed: the event has no key to hash.
    target = dataclasses.replace(published.target, partition_strategy="user_defined")
    messages = []
    for partition, eid in enumerate(eids):
        event = {
            "metadata": {
                "eid": eid,
                "occurred_at": occurred_at,
                "flow_id": flow_id,
                "partition": str(partition),
            },
            "data_op": "D",
            "data_type": table,
            "data": {},
        }
        message = prepare(target, event, 0, received_at)  # validated: a table event is rare
        message.key = TABLE_EVENT_KEY
        messages.append(message)
    return messages
