"""Nakadi's dead-letter queue for subscriptions: its annotations, and what goes to the queue.

A subscription annotated ``nakadi.zalando.org/subscription-max-event-send-count`` (2 to 10)
and ``nakadi.zalando.org/subscription-unprocessable-event-policy`` (``SKIP_EVENT`` or
``DEAD_LETTER_QUEUE``) has its poison pills found and moved out of the way:

- a stream that ends with events of a partition sent and not committed counts a failed send
  for it (a commit of the partition counts them back to 0);
- at that many failures the partition looks for the poison pill among the events of the
  failing batch (up to ``batch_limit`` events after the committed offset): it sends them one
  at a time, each only once the one before is committed;
- a single event that fails that many times is skipped (its offset committed for the
  consumer), after being published to ``nakadi.dead.letter.queue`` under
  ``DEAD_LETTER_QUEUE``; the partition keeps going one at a time to the end of the failing
  batch, then back to whole batches;
- resetting the subscription's cursors forgets all of it.

The state is per partition in Postgres (``sql/broker/010_dead_letter_queue.sql``), so it
survives the streams and the broker processes that count it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

MAX_EVENT_SEND_COUNT = "nakadi.zalando.org/subscription-max-event-send-count"
UNPROCESSABLE_EVENT_POLICY = "nakadi.zalando.org/subscription-unprocessable-event-policy"
POLICIES = ("SKIP_EVENT", "DEAD_LETTER_QUEUE")
SEND_COUNT_RANGE = (2, 10)
QUEUE_EVENT_TYPE = "nakadi.dead.letter.queue"


@dataclass(frozen=True)
class DeadLetterPolicy:
    max_event_send_count: int
    policy: str  # one of POLICIES

    @property
    def to_queue(self) -> bool:
        return self.policy == "DEAD_LETTER_QUEUE"


def problems(annotations: Any) -> list[str]:
    """What is wrong with the dead-letter annotations of a subscription, in Nakadi's words."""
    if not isinstance(annotations, Mapping):
        return []
    count = annotations.get(MAX_EVENT_SEND_COUNT)
    policy = annotations.get(UNPROCESSABLE_EVENT_POLICY)
    if count is not None:
        try:
            number = int(count)
        except (TypeError, ValueError):
            return [f"{MAX_EVENT_SEND_COUNT} must be an integer"]
        low, high = SEND_COUNT_RANGE
        if not low <= number <= high:
            return [f"{MAX_EVENT_SEND_COUNT} must be between {low} and {high}"]
        if policy is None:
            return [
                f"{UNPROCESSABLE_EVENT_POLICY} must be also set when setting {MAX_EVENT_SEND_COUNT}"
            ]
    if policy is not None:
        if policy not in POLICIES:
            return [f"{UNPROCESSABLE_EVENT_POLICY} must be one of: {', '.join(POLICIES)}"]
        if count is None:
            return [
                f"{MAX_EVENT_SEND_COUNT} must be also set when setting {UNPROCESSABLE_EVENT_POLICY}"
            ]
    return []


def policy_of(annotations: Mapping[str, str] | None) -> DeadLetterPolicy | None:
    """The subscription's policy, None when it has none (annotations checked when stored)."""
    if not annotations or MAX_EVENT_SEND_COUNT not in annotations:
        return None
    return DeadLetterPolicy(
        int(annotations[MAX_EVENT_SEND_COUNT]), annotations[UNPROCESSABLE_EVENT_POLICY]
    )


def dead_letter(
    subscription_id: str,
    event_type: str,
    partition: int,
    offset: str,
    failed_sends: int,
    event: Any,
) -> dict[str, Any]:
    """The ``nakadi.dead.letter.queue`` event of a skipped ``event``, as Nakadi writes it."""
    return {
        "subscription_id": subscription_id,
        "event_type": event_type,
        "partition": str(partition),
        "offset": offset,
        "error": {
            "message": f"Nakadi Auto DLQ: skipped due to failed commits count: {failed_sends}"
        },
        "event": event,
        "metadata": {
            "eid": str(uuid.uuid4()),
            "occurred_at": datetime.now(UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
        },
    }
