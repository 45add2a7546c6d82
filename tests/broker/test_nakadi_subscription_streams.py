"""Subscription streams as Nakadi's acceptance tests (``HilaAT``, ``SubscriptionAT``) and core
read them, on the real broker and Kafka: how a stream ends and says why, free slots, directly
requested partitions, committing ``BEGIN``, and the settings Nakadi's test profile changes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from tests.broker.stream_support import order, partitioned_type, publish
from tests.broker.subscription_support import Stream, commit, create, published
from tests.broker.swagger import assert_problem

FAST: dict[str, Any] = {"batch_flush_timeout": 0.2}


def debug(batch: dict[str, Any]) -> str | None:
    return batch.get("info", {}).get("debug")


def test_a_stream_timeout_below_the_flush_timeout_flushes_and_says_so(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi (whenStreamTimeoutReachedThenEventsFlushed): GET .../events?batch_flush_timeout=
    600&batch_limit=1000&stream_timeout=2&max_uncommitted_events=1000 with 4 events answers 200
    and two batches: the 4 events, then one without events saying "Stream timeout reached".
    Before: 422 "stream_timeout can't be lower than batch_flush_timeout"."""
    _name, sid = published(client, make_event_type, 4)
    stream = Stream(
        client,
        sid,
        batch_flush_timeout=600,
        batch_limit=1000,
        stream_timeout=2,
        max_uncommitted_events=1000,
    )
    assert stream.status_code == 200, stream.response.text
    got = stream.until_end()
    assert [len(b.get("events", [])) for b in got] == [4, 0]
    assert [debug(b) for b in got] == ["Stream started", "Stream timeout reached"]
    assert got[1]["cursor"]["offset"] == got[0]["cursor"]["offset"]
    # Nakadi (whenStreamTimeoutReachedPossibleToCommit): what came can still be committed.
    assert commit(client, sid, stream.id, [got[0]["cursor"]]).status_code == 204


def test_a_commit_timeout_ends_the_stream_with_a_batch_saying_so(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi (whenCommitTimeoutReachedSessionIsClosed): one event read and never committed;
    the stream's second and last batch is empty, at the event's cursor, saying "Commit timeout
    reached". Before, the stream ended without it."""
    _name, sid = published(client, make_event_type, 1)
    stream = Stream(client, sid, commit_timeout=1, **FAST)
    got = [b for b in stream.until_end() if b.get("events") or debug(b)]
    assert [(len(b.get("events", [])), debug(b)) for b in got] == [
        (1, "Stream started"),
        (0, "Commit timeout reached"),
    ]
    assert got[1]["cursor"]["offset"] == "001-0001-000000000000000000"


def test_a_cursor_reset_ends_the_stream_with_a_batch_saying_so(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi (whenResetCursorsThenStreamFromResetCursorOffset): PATCH /subscriptions/{id}/
    cursors closes the open stream, whose last batch says "Resetting subscription cursors"."""
    name, sid = published(client, make_event_type, 2)
    stream = Stream(client, sid, **FAST)
    (batch,) = stream.read_events(1)
    assert commit(client, sid, stream.id, [batch["cursor"]]).status_code == 204
    reset = client.patch(
        f"/subscriptions/{sid}/cursors",
        json={"items": [{"event_type": name, "partition": "0", "offset": "begin"}]},
    )
    assert reset.status_code == 204, reset.text
    rest = stream.until_end()
    assert debug(rest[-1]) == "Resetting subscription cursors"
    assert "events" not in rest[-1]


def test_a_balanced_stream_gets_409_when_streams_requested_every_partition(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi (StartingState): with both partitions requested directly by one stream, a stream
    asking for none has no slot: 409 "No free slots for streaming available for subscription
    {id}. Total slots: 2". Before, 200 and a stream that got nothing."""
    name = partitioned_type(make_event_type, 2)
    sid = create(client, [name])["id"]
    both = [{"event_type": name, "partition": p} for p in ("0", "1")]
    direct = Stream(client, sid, body={"partitions": both, **FAST})
    assert direct.status_code == 200
    try:
        refused = Stream(client, sid, **FAST)
        detail = assert_problem(refused.response, 409)
        assert (
            detail
            == f"No free slots for streaming available for subscription {sid}. Total slots: 2"
        )
        again = Stream(client, sid, body={"partitions": both[1:], **FAST})
        detail = assert_problem(again.response, 409)
        assert detail == (
            "The following partitions are already requested by other stream(s) of this"
            f" subscription: EventTypePartition{{eventType='{name}', partition='1'}}"
        )
    finally:
        direct.close()


def test_requested_partitions_given_twice_or_foreign_are_named_as_nakadi_names_them(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi (whenStreamDuplicatePartitionsThenUnprocessableEntity,
    whenStreamWrongPartitionsThenUnprocessableEntity): POST .../events with a partition twice is
    422 "Duplicated partition specified"; with partitions the subscription lacks, 422 naming
    them in the order sent. Before, duplicates collapsed and the names were Python tuples."""
    name = make_event_type()
    sid = create(client, [name])["id"]
    twice = [{"event_type": "et1", "partition": "0"}] * 2
    refused = client.post(f"/subscriptions/{sid}/events", json={"partitions": twice})
    assert assert_problem(refused, 422) == "Duplicated partition specified"
    wrong = [
        {"event_type": name, "partition": "0"},
        {"event_type": name, "partition": "1"},
        {"event_type": "dummy-et-123", "partition": "0"},
    ]
    refused = client.post(f"/subscriptions/{sid}/events", json={"partitions": wrong})
    assert assert_problem(refused, 422) == (
        "Wrong partitions specified - some partitions don't belong to subscription: "
        f"EventTypePartition{{eventType='{name}', partition='1'}}, "
        "EventTypePartition{eventType='dummy-et-123', partition='0'}"
    )


def test_committing_begin_of_an_unread_partition_is_outdated(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi (whenNoEventsThenBeginOffsetIsUsed): on a subscription with no events, GET
    cursors says "001-0001--1" and committing offset "BEGIN" answers 200 (outdated). Before,
    422."""
    name = make_event_type()
    sid = create(client, [name], read_from="begin")["id"]
    stream = Stream(client, sid, **FAST)
    try:
        assert stream.batch() is not None
        cursors = client.get(f"/subscriptions/{sid}/cursors").json()["items"]
        assert [c["offset"] for c in cursors] == ["001-0001--1"]
        begin = {"event_type": name, "partition": "0", "offset": "BEGIN", "cursor_token": "abc"}
        answer = commit(client, sid, stream.id, [begin])
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"items": [{"cursor": begin, "result": "outdated"}]}
    finally:
        stream.close()


def test_the_max_commit_timeout_is_a_setting_and_the_default_commit_timeout(
    nakadi_test_profile: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi (nakadi.stream.max.commitTimeout, 5 in its test profile): commit_timeout=6 is 422
    "commit_timeout can not be more than 5"; a stream asking for none is closed 5 s after an
    event it did not commit (whenCommitTimeoutReachedSessionIsClosed)."""
    _name, sid = published(nakadi_test_profile, make_event_type, 1)
    refused = nakadi_test_profile.get(f"/subscriptions/{sid}/events", params={"commit_timeout": 6})
    assert assert_problem(refused, 422) == "commit_timeout can not be more than 5"
    stream = Stream(nakadi_test_profile, sid, **FAST)
    stream.read_events(1)
    sent = time.monotonic()
    rest = stream.until_end()
    assert debug(rest[-1]) == "Commit timeout reached"
    assert 4.0 <= time.monotonic() - sent <= 10.0


def test_past_the_memory_limit_a_batch_goes_early_saying_so(
    nakadi_test_profile: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi (StreamingState, nakadi.subscription.maxStreamMemoryBytes, 10,000 bytes in its
    test profile): once the events waiting for their batch pass the limit, the partition holding
    the most sends them, saying "Stream parameters are causing overflow". 40 events of ~1 KB
    read with batch_limit=1000 come long before the 30 s flush timeout; before, they waited."""
    name = make_event_type()
    sid = create(nakadi_test_profile, [name], read_from="begin")["id"]
    padding = "x" * 1000
    publish(nakadi_test_profile, name, [{**order(str(i)), "padding": padding} for i in range(40)])
    stream = Stream(nakadi_test_profile, sid, batch_limit=1000, max_uncommitted_events=1000)
    try:
        started = time.monotonic()
        got = stream.read_events(30)
        assert time.monotonic() - started < 20
        assert debug(got[0]) == "Stream parameters are causing overflow"
        assert all(len(b["events"]) <= 12 for b in got)
    finally:
        stream.close()


def test_the_partitions_of_a_subscription_are_bounded_by_a_setting(
    nakadi_test_profile: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Nakadi (testSubscriptionWithManyEventTypesIsNotCreated, maxPartitions 30 in its test
    profile): event types of 31 partitions in all are 422 "total partition count for
    subscription is 31, but the maximum partition count is 30"."""
    names = [partitioned_type(make_event_type, n) for n in (12, 12, 7)]
    body = {"owning_application": "app", "event_types": names}
    refused = nakadi_test_profile.post("/subscriptions", json=body)
    assert assert_problem(refused, 422) == (
        "total partition count for subscription is 31, but the maximum partition count is 30"
    )
