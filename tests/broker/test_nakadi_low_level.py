"""The low-level stream's end and memory limit as Nakadi's acceptance tests read them
(``EventStreamReadingAT``: an event type of 8 partitions, ``batch_limit=5&stream_timeout=2&
batch_flush_timeout=2``), on the real broker and Kafka.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from tests.broker.stream_support import order, partitioned_type, publish, read

PARTITIONS = 8
NAKADI_READ = {"batch_limit": 5, "stream_timeout": 2, "batch_flush_timeout": 2}


def newest(client: httpx.Client, name: str) -> list[dict[str, str]]:
    """Cursors at the newest event of every partition (Nakadi's getOffsetsToReadFromLatest)."""
    found = client.get(f"/event-types/{name}/partitions").json()
    return [{"partition": p["partition"], "offset": p["newest_available_offset"]} for p in found]


def summary(batches: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """(partition, events) of each batch, in the order sent."""
    return [(b["cursor"]["partition"], len(b.get("events", []))) for b in batches]


def test_without_cursors_a_timed_out_stream_sends_each_partitions_keep_alive(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi (whenReadFromTheEndThenLatestOffsetsInStream): GET .../events?stream_timeout=2&
    batch_flush_timeout=2 answers 8 batches, one per partition at its newest offset; the stream
    ended before with an empty body."""
    name = partitioned_type(make_event_type, PARTITIONS)
    got = read(client, name, stream_timeout=2, batch_flush_timeout=2)
    assert summary(got) == [(str(p), 0) for p in range(PARTITIONS)]
    assert [b["cursor"] for b in got] == newest(client, name)


def test_a_timed_out_stream_flushes_every_due_partition_then_what_waits(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi (whenPushFewEventsAndReadThenGetEventsInStream and
    whenPushedAmountOfEventsMoreThanBatchSizeAndReadThenGetEventsInMultipleBatches): 2 events
    in partition 0 read from the newest cursors answer 8 batches, partition 0's with the 2
    events; 8 events answer 9: 5 at once, a keep-alive of each other partition when the stream
    times out, then the 3 that waited. Before, only partitions with events sent anything."""
    name = partitioned_type(make_event_type, PARTITIONS)
    start = newest(client, name)
    publish(client, name, [order(str(i), partition="0") for i in range(2)])
    assert summary(read(client, name, start, **NAKADI_READ)) == [("0", 2)] + [
        (str(p), 0) for p in range(1, PARTITIONS)
    ]

    start = newest(client, name)
    publish(client, name, [order(str(i), partition="0") for i in range(8)])
    got = read(client, name, start, **NAKADI_READ)
    assert len(got) == PARTITIONS + 1
    # Partition 0's second batch comes after the keep-alives, or among them when its own flush
    # timeout (2 s after its first batch) came too before the stream saw its end.
    assert [n for p, n in summary(got) if p == "0"] == [5, 3]
    assert sorted(summary(got)[1:]) == [("0", 3)] + [(str(p), 0) for p in range(1, PARTITIONS)]
    assert [e["order_number"] for b in got for e in b.get("events", [])] == [
        str(i) for i in range(8)
    ]


def test_past_the_memory_limit_the_fullest_batch_is_sent_early(
    nakadi_test_profile: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi (EventStream, nakadi.stream.maxStreamMemoryBytes): once the events waiting for
    their batch pass the limit, the partition holding the most sends them at once. 40 events of
    ~1 KB read with batch_limit=40 come in batches of ~10 KB; before, in one batch of 40."""
    name = make_event_type()
    padding = "x" * 1000
    publish(nakadi_test_profile, name, [{**order(str(i)), "padding": padding} for i in range(40)])
    got = read(
        nakadi_test_profile,
        name,
        [{"partition": "0", "offset": "begin"}],
        batch_limit=40,
        stream_limit=40,
    )
    sizes = [len(b["events"]) for b in got if b.get("events")]
    assert sum(sizes) == 40
    # Each early batch is just past the limit (ten events of ~1 KB), not the whole 40.
    assert len(sizes) >= 3 and max(sizes) <= 12, sizes
