"""Which stream of a subscription reads which partition: Nakadi's rebalancing by partition count.

Streams that requested partitions directly get exactly those (a direct request
wins over an automatic assignment). The other partitions are shared among the
streams that requested none, as evenly as counts allow (6 partitions over 2
streams: 3 and 3), moving as few as possible: a partition stays with the
stream that has it while that stream is within its share. Pure: the caller
(:mod:`changebroker.broker.subscriptions.stream_api`) reads and writes Postgres.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

PartitionKey = tuple[str, int]


@dataclass(frozen=True)
class Slot:
    """A live stream: its id and the partitions it requested directly (empty: balanced)."""

    stream_id: str
    requested: frozenset[PartitionKey] = frozenset()


def assign(
    keys: Sequence[PartitionKey],
    streams: Sequence[Slot],
    current: Mapping[PartitionKey, str],
) -> dict[PartitionKey, str | None]:
    """The target stream of every key (None when no stream may take it).

    ``streams`` oldest first (the older stream wins a tie); ``current`` is where
    each key is now or is already moving to.
    """
    target: dict[PartitionKey, str | None] = {}
    for slot in streams:
        for key in sorted(slot.requested):
            target.setdefault(key, slot.stream_id)
    balanced = [s.stream_id for s in streams if not s.requested]
    free = [key for key in sorted(keys) if key not in target]
    if not balanced:
        return {**target, **dict.fromkeys(free)}
    base, extra = divmod(len(free), len(balanced))
    holding = {s: sum(1 for k in free if current.get(k) == s) for s in balanced}
    # The streams holding most keep the extra ones: fewer partitions move.
    by_holding = sorted(balanced, key=lambda s: -holding[s])
    share = {s: base + (1 if i < extra else 0) for i, s in enumerate(by_holding)}
    count = dict.fromkeys(balanced, 0)
    unplaced = []
    for key in free:
        owner = current.get(key)
        if owner in count and count[owner] < share[owner]:
            target[key] = owner
            count[owner] += 1
        else:
            unplaced.append(key)
    for key in unplaced:
        stream = next(s for s in balanced if count[s] < share[s])
        target[key] = stream
        count[stream] += 1
    return target
