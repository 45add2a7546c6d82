"""Events a subscription stream has read from Kafka but may not send yet.

A stream may have at most ``max_uncommitted_events`` sent and uncommitted. Reading only that
many spreads them thin over the partitions: with four partitions, the 1,000 events a commit
frees would go out as four batches of 250, and a client committing every batch commits four
times as often. Nakadi keeps reading ahead into each partition's buffer and sends whole
batches of one partition; so does this: a stream reads up to a bounded amount beyond what it
may send, and hands out what it may send a partition at a time, in turns, so that a quiet
partition's events are not held back behind a busy one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container, Mapping

from confluent_kafka import Message

from changebroker.broker.streams.event_stream import PartitionBatch

# What a stream holds read ahead at most (beside librdkafka's own prefetch queue), and at
# least in events when they are small: librdkafka hands out a fetch partition by partition,
# so a partition's events can wait behind a whole fetch of another's.
READ_AHEAD_BYTES = 4 << 20
READ_AHEAD_EVENTS = 5_000

PartitionKey = tuple[str, int]  # (topic, partition), as Kafka messages name it


class ReadAhead:
    def __init__(self, memory_limit: int = READ_AHEAD_BYTES) -> None:
        """``memory_limit``: the stream's bytes for events it holds; what is read ahead keeps
        within it too."""
        self._most_bytes = min(READ_AHEAD_BYTES, memory_limit)
        self._partitions: dict[PartitionKey, deque[Message]] = {}
        self._failed: list[Message] = []
        # Partitions whose flush timeout passed while they had events here that could not be
        # sent (no allowance): served first once there is room, keep-alives or not.
        self._overdue: set[PartitionKey] = set()
        self._turn = 0
        self.count = 0
        self.bytes = 0

    def room(self, most_events: int) -> int:
        """How many more events may be read now: ``most_events`` at most, none once full."""
        if self.bytes >= self._most_bytes:
            return 0
        return max(most_events - self.count, 0)

    def add(self, messages: list[Message], ours: Container[PartitionKey]) -> None:
        """Keeps the messages of partitions in ``ours`` (others were given up since they were
        fetched); an error is handed out first, for the batcher to raise."""
        for message in messages:
            if message.error() is not None:
                self._failed.append(message)
                continue
            key = (message.topic(), message.partition())
            if key not in ours:
                continue
            self._partitions.setdefault(key, deque()).append(message)  # type: ignore[arg-type]
            self.count += 1
            self.bytes += len(message.value() or b"")

    def take(
        self,
        batches: Mapping[PartitionKey, PartitionBatch],
        *,
        allowance: int,
        batch_limit: int,
        now: float,
        full: bool,
        ending: bool = False,
        caps: Mapping[PartitionKey, int] | None = None,
    ) -> list[Message]:
        """What the batcher may be given now, taking partitions in turns.

        ``allowance``: events the stream may still send (max_uncommitted_events less what is
        uncommitted); the batcher's partitions already hold some of it, and a batch is full at
        ``min(batch_limit, allowance)``. First come the events of partitions whose batch is due
        (its flush timeout passed), so a busy partition never holds a quiet one back; then the
        events that complete batches; and when no batch could be completed while what was
        read already fills the allowance (or the read-ahead is ``full``), whatever fits:
        waiting could only delay it to the flush timeout. When the stream is ``ending``,
        whatever fits in any case. ``caps``: the most events a partition may hold in the
        batcher after this (one looking for a dead letter takes one at a time).
        """
        out, self._failed = self._failed, []
        keys = [key for key, waiting in self._partitions.items() if waiting and key in batches]
        if not keys:
            return out
        pending = {key: len(batch.pending) for key, batch in batches.items()}
        budget = allowance - sum(pending.values())  # what the batcher may still be given
        self._turn = (self._turn + 1) % len(keys)
        turns = keys[self._turn :] + keys[: self._turn]

        given = dict.fromkeys(keys, 0)
        held = dict(pending)

        def give(key: PartitionKey, most: int) -> int:
            nonlocal budget
            if caps is not None and key in caps:
                most = min(most, caps[key] - held[key] - given[key])
            taken = self._pop(key, max(most, 0))
            out.extend(taken)
            budget -= len(taken)
            pending[key] += len(taken)
            given[key] += len(taken)
            return len(taken)

        for key in turns:
            if budget > 0 and (key in self._overdue or now >= batches[key].flush_at):
                give(key, min(budget, batch_limit - pending[key]))
                self._overdue.discard(key)
        for key in turns:
            full_at = (
                min(batch_limit, caps[key]) if caps is not None and key in caps else batch_limit
            )
            while budget > 0:
                # Fills the batch, or the whole allowance (then it goes out at once, too).
                needed = min(full_at, pending[key] + budget) - pending[key]
                if not 0 < needed <= len(self._partitions[key]) or not give(key, needed):
                    break
                pending[key] = 0
        if ending or (not out and (full or self.count >= budget)):
            for key in turns:
                if budget > 0:
                    give(key, budget)
        return out

    def note_overdue(self, batches: Mapping[PartitionKey, PartitionBatch], now: float) -> None:
        """Call before the batcher flushes: its keep-alive would restart the flush timeout of a
        partition whose events wait here."""
        for key, waiting in self._partitions.items():
            if waiting and key in batches and now >= batches[key].flush_at:
                self._overdue.add(key)

    def _pop(self, key: PartitionKey, most: int) -> list[Message]:
        waiting = self._partitions[key]
        out = [waiting.popleft() for _ in range(min(most, len(waiting)))]
        self.count -= len(out)
        self.bytes -= sum(len(message.value() or b"") for message in out)
        return out

    def holds(self, key: PartitionKey) -> bool:
        """Whether events of the partition wait here."""
        return bool(self._partitions.get(key))

    def pop_first(self, key: PartitionKey) -> Message | None:
        """The partition's first event read ahead (tombstones passed over), if any yet."""
        waiting = self._partitions.get(key)
        while waiting:
            message = self._pop(key, 1)[0]
            if message.value() is not None:
                return message
        return None

    def drop(self, key: PartitionKey) -> None:
        """Forgets a partition's events: it was given up, or starts again elsewhere."""
        if key in self._partitions:
            self._pop(key, len(self._partitions[key]))
            del self._partitions[key]
        self._overdue.discard(key)
