"""Where an event type's events live in Kafka: the contract between writing and reading.

Event type metadata (``broker/event_types``) owns the mapping; the streaming
and cursor endpoints only need it through :class:`TopicResolver`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class EventTypeTopic:
    event_type: str
    topic: str
    partitions: int
    # Nakadi timelines: offsets read ``001-<timeline as 4 hex>-<kafka offset>``; we run one.
    timeline: int = 1


class TopicResolver(Protocol):
    """``await resolve("order.created")`` -> its topic, or ``None`` when it does not exist."""

    async def __call__(self, event_type: str) -> EventTypeTopic | None: ...
