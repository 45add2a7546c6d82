"""Subscriptions as the manual describes them, on two broker processes sharing Postgres and Kafka.

``client`` talks to one broker app, ``other`` to a second one on the same
metadata database: streams and commits go to different processes on purpose.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from changebroker.broker.settings import Settings
from changebroker.stack.processes import wait_until
from changebroker.stack.run import broker_process
from tests.broker.stream_support import order, partitioned_type, publish
from tests.broker.subscription_support import (
    Stream,
    commit,
    create,
    next_committed,
    numbers,
    owners,
    published,
    stats,
    wait_until_gone,
)
from tests.broker.swagger import assert_problem, validate
from tests.support.brokers import broker_client

FAST: dict[str, Any] = {"batch_flush_timeout": 0.2}


@pytest.fixture(scope="module")
def other(broker_dsn: str, kafka_bootstrap: str, broker_url: str) -> Iterator[httpx.Client]:
    """A second broker process on the first one's database (``broker_url`` migrated it)."""
    settings = Settings(pg_dsn=broker_dsn, kafka_bootstrap=kafka_bootstrap, max_partitions=12)
    with broker_client(settings) as client:
        yield client


def test_the_manuals_flow_create_stream_commit_cursors_stats_delete(
    client: httpx.Client, other: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = make_event_type()
    body = {"owning_application": "order-service", "event_types": [name]}
    created = client.post("/subscriptions", json=body)
    assert created.status_code == 201, created.text
    subscription = created.json()
    validate("Subscription", subscription)
    sid = subscription["id"]
    assert created.headers["Location"] == f"/subscriptions/{sid}"
    assert subscription["consumer_group"] == "default"
    assert subscription["read_from"] == "end"
    # The same key again, on the other process: the same subscription, 200.
    again = other.post("/subscriptions", json=body)
    assert again.status_code == 200
    assert again.json()["id"] == sid
    assert other.get(f"/subscriptions/{sid}").json() == subscription
    listed = client.get("/subscriptions", params={"event_type": name, "show_status": "true"})
    assert listed.status_code == 200
    assert [s["id"] for s in listed.json()["items"]] == [sid]
    validate("Subscription", listed.json()["items"][0])

    stream = Stream(client, sid, **FAST)
    assert stream.status_code == 200
    first = stream.batch()
    assert first is not None and first["info"] == {"debug": "Stream started"}
    publish(client, name, [order("a"), order("b")])
    got = stream.read_events(2)
    assert numbers(got) == ["a", "b"]
    assert got[0]["cursor"]["event_type"] == name
    # The commit goes to the other process: the session is in Postgres, not in one process.
    assert commit(other, sid, stream.id, [got[-1]["cursor"]]).status_code == 204

    cursors = other.get(f"/subscriptions/{sid}/cursors")
    assert cursors.status_code == 200
    for cursor in cursors.json()["items"]:
        validate("SubscriptionCursor", cursor)
    assert [(c["partition"], c["offset"]) for c in cursors.json()["items"]] == [
        ("0", got[-1]["cursor"]["offset"])
    ]
    [item] = stats(other, sid, show_time_lag="true")
    assert item["partitions"] == [
        {
            "partition": "0",
            "state": "assigned",
            "stream_id": stream.id,
            "assignment_type": "auto",
            "unconsumed_events": 0,
            "consumer_lag_seconds": 0,
        }
    ]
    publish(client, name, [order("c")])
    [item] = stats(other, sid, show_time_lag="true")
    assert item["partitions"][0]["unconsumed_events"] == 1
    assert item["partitions"][0]["consumer_lag_seconds"] >= 0
    stream.close()

    assert other.delete(f"/subscriptions/{sid}").status_code == 204
    assert_problem(client.get(f"/subscriptions/{sid}"), 404)
    assert_problem(client.delete(f"/subscriptions/{sid}"), 404)


def test_at_least_once_uncommitted_events_come_again_committed_ones_never(
    client: httpx.Client, other: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    _name, sid = published(client, make_event_type, 4)

    first = Stream(client, sid, commit_timeout=1, **FAST)
    got = first.read_events(4)
    assert numbers(got) == ["0", "1", "2", "3"]
    assert commit(client, sid, first.id, [got[1]["cursor"]]).status_code == 204
    first.close()  # the consumer dies with "2" and "3" uncommitted
    wait_until_gone(other, sid, first.id)

    second = Stream(other, sid, **FAST)
    assert numbers(second.read_events(2)) == ["2", "3"]
    second.close()


def test_the_manuals_rebalancing_example_six_partitions_three_and_three(
    client: httpx.Client, other: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    a, b = partitioned_type(make_event_type, 2), partitioned_type(make_event_type, 4)
    sid = create(client, [a, b], read_from="begin")["id"]
    publish(client, a, [order(f"a{p}", str(p)) for p in range(2)])
    publish(client, b, [order(f"b{p}", str(p)) for p in range(4)])

    one = Stream(client, sid, **FAST)
    got = one.read_events(6)
    assert sorted(numbers(got)) == ["a0", "a1", "b0", "b1", "b2", "b3"]
    assert set(owners(other, sid).values()) == {one.id}

    two = Stream(other, sid, **FAST)
    # Until the first stream commits, the moving partitions wait for it.
    moving = [p for item in stats(client, sid) for p in item["partitions"]]
    assert sum(p["state"] == "reassigning" for p in moving) == 3
    # The first stream (served by `client`) commits through the other process.
    assert commit(other, sid, one.id, [g["cursor"] for g in got]).status_code == 204
    publish(client, a, [order(f"a{p}-2", str(p)) for p in range(2)])
    publish(client, b, [order(f"b{p}-2", str(p)) for p in range(4)])
    from_one = one.read_events(3)
    from_two = two.read_events(3)
    held = owners(client, sid)
    assert Counter(held.values()) == {one.id: 3, two.id: 3}
    assert {(b["cursor"]["event_type"], b["cursor"]["partition"]) for b in from_one} == {
        k for k, v in held.items() if v == one.id
    }
    assert {(b["cursor"]["event_type"], b["cursor"]["partition"]) for b in from_two} == {
        k for k, v in held.items() if v == two.id
    }
    assert sorted(numbers(from_one) + numbers(from_two)) == sorted(
        ["a0-2", "a1-2", "b0-2", "b1-2", "b2-2", "b3-2"]
    )
    one.close()
    two.close()


def test_a_commit_after_the_commit_timeout_is_422_and_an_old_cursor_is_outdated(
    client: httpx.Client, other: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name, sid = published(client, make_event_type, 2)

    stream = Stream(client, sid, commit_timeout=1, **FAST)
    got = stream.read_events(2)
    assert commit(other, sid, stream.id, [got[1]["cursor"]]).status_code == 204
    outdated = commit(other, sid, stream.id, [got[0]["cursor"], got[1]["cursor"]])
    assert outdated.status_code == 200
    validate("CursorCommitResult", outdated.json()["items"][0])
    assert [i["result"] for i in outdated.json()["items"]] == ["outdated", "outdated"]
    publish(client, name, [order("2")])
    late = stream.read_events(1)
    # Uncommitted for commit_timeout: the server ends the stream, and the session with it.
    stream.until_end()
    assert stream.ended
    assert_problem(commit(other, sid, stream.id, [late[0]["cursor"]]), 422, stream.id)
    assert_problem(commit(other, sid, "not-a-stream", [late[0]["cursor"]]), 422)
    stream.close()


def test_409_when_every_partition_is_taken_and_422_for_a_foreign_partition(
    client: httpx.Client, other: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = make_event_type()
    sid = create(client, [name])["id"]
    stream = Stream(client, sid, **FAST)
    assert stream.batch() is not None
    refused = Stream(other, sid, **FAST)
    assert_problem(refused.response, 409, "No free slots")
    foreign = other.post(
        f"/subscriptions/{sid}/events",
        json={"partitions": [{"event_type": name, "partition": "7"}]},
    )
    assert_problem(foreign, 422)
    stream.close()


def test_a_commit_naming_a_partition_the_subscription_lacks_is_422_and_commits_nothing(
    client: httpx.Client, other: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name, sid = published(client, make_event_type, 1)
    stream = Stream(client, sid, **FAST)
    (batch,) = stream.read_events(1)
    cursor = batch["cursor"]
    # Any whole number is a partition's name; one beyond Postgres's int is no exception.
    for partition in ("7", "99999999999", "9" * 40):
        answer = commit(other, sid, stream.id, [cursor, {**cursor, "partition": partition}])
        assert_problem(answer, 422, f"partition {int(partition)} of {name}")
    held = other.get(f"/subscriptions/{sid}/cursors").json()["items"]
    assert [c["offset"] for c in held if c["partition"] == cursor["partition"]] != [
        cursor["offset"]
    ]
    assert commit(other, sid, stream.id, [cursor]).status_code == 204
    stream.close()


def test_ids_postgres_does_not_read_as_uuids_name_no_subscription_and_no_stream(
    client: httpx.Client, other: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    """Python's uuid.UUID reads "urn:uuid:..." and braces, Postgres does not: such an id
    names nothing (404, or 422 for a stream), rather than failing the request."""
    _, sid = published(client, make_event_type, 1)
    stream = Stream(client, sid, **FAST)
    (batch,) = stream.read_events(1)
    for form in ("urn:uuid:{}", "{{{}}}"):
        assert_problem(other.get(f"/subscriptions/{form.format(sid)}"), 404)
        assert_problem(other.get(f"/subscriptions/{form.format(sid)}/stats"), 404)
        assert_problem(commit(other, sid, form.format(stream.id), [batch["cursor"]]), 422)
    assert commit(other, sid, stream.id, [batch["cursor"]]).status_code == 204
    stream.close()


def test_a_reset_while_streaming_ends_the_stream_and_the_next_one_starts_there(
    client: httpx.Client, other: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name, sid = published(client, make_event_type, 3)
    stream = Stream(client, sid, **FAST)
    got = stream.read_events(3)
    assert commit(client, sid, stream.id, [got[-1]["cursor"]]).status_code == 204

    reset = other.patch(
        f"/subscriptions/{sid}/cursors",
        json={
            "items": [{"event_type": name, "partition": "0", "offset": got[0]["cursor"]["offset"]}]
        },
    )
    assert reset.status_code == 204, reset.text
    stream.until_end()
    assert stream.ended
    assert_problem(commit(client, sid, stream.id, [got[-1]["cursor"]]), 422)
    again = Stream(other, sid, **FAST)
    assert numbers(again.read_events(2)) == ["1", "2"]
    again.close()
    stream.close()


def test_max_uncommitted_events_pauses_the_stream_until_a_commit(
    client: httpx.Client, other: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    _name, sid = published(client, make_event_type, 5)
    stream = Stream(client, sid, max_uncommitted_events=2, **FAST)
    got = stream.read_events(2)
    assert numbers(got) == ["0", "1"]
    # Paused: the three waiting events are not sent, keep-alives are.
    paused = [stream.batch() for _ in range(3)]
    assert all(b is not None and "events" not in b for b in paused), paused
    assert commit(other, sid, stream.id, [got[0]["cursor"]]).status_code == 204
    assert numbers(stream.read_events(1)) == ["2"]
    stream.close()


def test_direct_partitions_win_and_a_stream_commits_only_what_it_holds(
    client: httpx.Client, other: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = partitioned_type(make_event_type, 2)
    sid = create(client, [name], read_from="begin")["id"]
    publish(client, name, [order("p0", "0"), order("p1", "1")])
    auto = Stream(client, sid, **FAST)
    got = auto.read_events(2)
    assert commit(client, sid, auto.id, [g["cursor"] for g in got]).status_code == 204
    # A second stream asks for partition 1 by name: it moves there (nothing uncommitted).
    direct = Stream(
        other, sid, body={"partitions": [{"event_type": name, "partition": "1"}], **FAST}
    )
    first = direct.batch()
    assert first is not None and first["cursor"]["partition"] == "1"
    [item] = stats(client, sid)
    assert {p["partition"]: (p["stream_id"], p["assignment_type"]) for p in item["partitions"]} == {
        "0": (auto.id, "auto"),
        "1": (direct.id, "direct"),
    }
    partition_one = next(g["cursor"] for g in got if g["cursor"]["partition"] == "1")
    assert_problem(commit(client, sid, auto.id, [partition_one]), 422, "not assigned")
    auto.close()
    direct.close()


def test_create_rejects_what_nakadi_rejects_and_lists_in_pages(
    client: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = make_event_type()
    missing = client.post(
        "/subscriptions", json={"owning_application": "x", "event_types": [f"{name}.none"]}
    )
    assert_problem(missing, 422, "not found")
    no_cursors = client.post(
        "/subscriptions",
        json={"owning_application": "x", "event_types": [name], "read_from": "cursors"},
    )
    assert_problem(no_cursors, 422, "initial_cursors")
    ids = [
        create(
            client,
            [name],
            consumer_group=f"g{i}",
            read_from="cursors",
            initial_cursors=[{"event_type": name, "partition": "0", "offset": "begin"}],
        )["id"]
        for i in range(3)
    ]
    first = client.get("/subscriptions", params={"event_type": name, "limit": 2})
    assert first.status_code == 200
    assert [s["id"] for s in first.json()["items"]] == ids[::-1][:2]
    assert "prev" not in first.json()["_links"]
    following = client.get(first.json()["_links"]["next"]["href"])
    assert [s["id"] for s in following.json()["items"]] == ids[:1]
    assert "next" not in following.json()["_links"]
    assert_problem(client.get("/subscriptions", params={"limit": 0}), 400)
    # Postgres stores no NUL: refused as input, not a 500.
    nul = client.post("/subscriptions", json={"owning_application": "a\x00", "event_types": [name]})
    assert_problem(nul, 422, "NUL")
    assert_problem(client.get("/subscriptions", params={"event_type": "\x00"}), 400, "NUL")


def test_a_deleted_event_type_leaves_the_subscription_readable_and_unstreamable(
    client: httpx.Client, make_event_type: Callable[..., str], broker_dsn: str
) -> None:
    """A subscription whose event type is gone: the API deletes such subscriptions with the
    type (or refuses, 409), but one a broker before that left behind, or one created while its
    type was being deleted, still answers."""
    kept, dropped = make_event_type(), make_event_type()
    sid = create(client, [kept, dropped], read_from="begin")["id"]
    stream = Stream(client, sid, stream_keep_alive_limit=1, **FAST)
    stream.until_end()
    with psycopg.connect(broker_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM broker_event_types WHERE name = %s", (dropped,))
    assert [item["event_type"] for item in stats(client, sid)] == [kept]
    listed = client.get("/subscriptions", params={"event_type": kept, "show_status": "true"})
    assert [s["event_type"] for s in listed.json()["items"][0]["status"]] == [kept]
    assert {
        c["event_type"] for c in client.get(f"/subscriptions/{sid}/cursors").json()["items"]
    } == {kept}
    assert_problem(Stream(client, sid, **FAST).response, 422, dropped)


def test_the_partitions_of_a_killed_broker_process_go_to_the_streams_left(
    client: httpx.Client,
    broker_dsn: str,
    kafka_bootstrap: str,
    make_event_type: Callable[..., str],
    tmp_path: Path,
) -> None:
    name = partitioned_type(make_event_type, 2)
    sid = create(client, [name], read_from="begin")["id"]
    doomed, url = broker_process(broker_dsn, kafka_bootstrap, tmp_path / "broker.log")
    doomed.start()
    try:
        with httpx.Client(base_url=url, timeout=30) as there:
            first = Stream(there, sid, **FAST)
            assert first.batch() is not None
            second = Stream(client, sid, **FAST)
            assert second.batch() is not None  # it holds one partition now
            doomed.kill()
    finally:
        doomed.stop()
    held_by_second = {p for (_, p), owner in owners(client, sid).items() if owner == second.id}
    assert len(held_by_second) == 1
    # As if ALIVE_SECONDS passed without the killed process renewing its session.
    with psycopg.connect(broker_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE broker_subscription_sessions SET alive_until = now() WHERE stream_id = %s",
            (first.id,),
        )
    publish(client, name, [order("left", "0"), order("right", "1")])
    assert sorted(numbers(second.read_events(2))) == ["left", "right"]
    second.close()


def test_new_streams_get_409_while_a_reset_waits_for_the_streams_it_closed(
    client: httpx.Client, other: httpx.Client, broker_dsn: str, make_event_type: Callable[..., str]
) -> None:
    name = make_event_type()
    sid = create(client, [name], read_from="begin")["id"]
    # An empty reset initialises the cursors and nothing else (the spec's explicit init).
    assert client.patch(f"/subscriptions/{sid}/cursors", json={"items": []}).status_code == 204
    assert [c["offset"] for c in client.get(f"/subscriptions/{sid}/cursors").json()["items"]] == [
        "001-0001--1"
    ]
    # A stream on another broker process that has not ended yet, as that process recorded it.
    with psycopg.connect(broker_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO broker_subscription_sessions"
            " (stream_id, subscription_id, commit_timeout, alive_until)"
            " VALUES (%s, %s, 60, now() + interval '3 seconds')",
            (str(uuid.uuid4()), sid),
        )

        def resetting() -> bool:
            row = conn.execute(
                "SELECT reset_until IS NOT NULL FROM broker_subscriptions WHERE id = %s", (sid,)
            ).fetchone()
            return bool(row and row[0])

        items = {"items": [{"event_type": name, "partition": "0", "offset": "begin"}]}
        with ThreadPoolExecutor(1) as pool:
            # Its own client: the reset blocks while this thread goes on.
            url = f"{other.base_url}/subscriptions/{sid}/cursors"
            reset = pool.submit(httpx.patch, url, json=items, timeout=60)
            wait_until(lambda: resetting() or reset.done(), timeout=30, what="the reset to start")
            assert not reset.done(), reset.result().text
            assert_problem(
                Stream(client, sid, **FAST).response, 409, "Resetting subscription cursors"
            )
            assert reset.result().status_code == 204
        assert not resetting()
    after = Stream(client, sid, **FAST)
    assert after.batch() is not None
    after.close()


def test_a_consumer_whose_connection_closed_may_still_commit_within_commit_timeout(
    client: httpx.Client, other: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name, sid = published(client, make_event_type, 2)
    gone = Stream(client, sid, commit_timeout=30, **FAST)
    got = gone.read_events(2)
    gone.close()
    wait_until_gone(other, sid, gone.id)
    # The stream is over, its window is not: the commit counts, and the partition is free.
    assert commit(other, sid, gone.id, [got[-1]["cursor"]]).status_code == 204
    [item] = stats(other, sid)
    assert item["partitions"][0]["state"] == "unassigned"
    assert item["partitions"][0]["unconsumed_events"] == 0
    publish(client, name, [order("2")])
    after = Stream(other, sid, **FAST)
    assert numbers(after.read_events(1)) == ["2"]
    after.close()


@pytest.mark.parametrize("read_from", ["begin", "end"])
def test_initial_cursors_are_ignored_unless_read_from_is_cursors(
    client: httpx.Client, make_event_type: Callable[..., str], read_from: str
) -> None:
    name = make_event_type()
    publish(client, name, [order("old")])
    # What fahrschein's SubscriptionBuilder sends for readFromBegin() / readFromEnd().
    empty = client.post(
        "/subscriptions",
        json={
            "owning_application": "fahrschein-app",
            "event_types": [name],
            "consumer_group": f"empty-{read_from}",
            "read_from": read_from,
            "initial_cursors": [],
        },
    )
    assert empty.status_code == 201, empty.text
    validate("Subscription", empty.json())
    # Cursors given with begin or end are not looked at either (Nakadi reads them only for
    # read_from cursors): this one names a partition the type does not have.
    ignored = client.post(
        "/subscriptions",
        json={
            "owning_application": "fahrschein-app",
            "event_types": [name],
            "consumer_group": f"ignored-{read_from}",
            "read_from": read_from,
            "initial_cursors": [{"event_type": name, "partition": "7", "offset": "begin"}],
        },
    )
    assert ignored.status_code == 201, ignored.text
    # "end" is where the first stream finds the partition: start both, then publish.
    streams = [Stream(client, s.json()["id"], **FAST) for s in (empty, ignored)]
    if read_from == "end":
        for stream in streams:
            first = stream.batch()
            assert first is not None and "events" not in first
    publish(client, name, [order("new")])
    expected = ["old", "new"] if read_from == "begin" else ["new"]
    for stream in streams:
        assert numbers(stream.read_events(len(expected))) == expected
        stream.close()
    assert_problem(
        client.post(
            "/subscriptions",
            json={"owning_application": "x", "event_types": [name], "initial_cursors": {}},
        ),
        422,
        "initial_cursors",
    )


def test_a_batch_is_never_larger_than_max_uncommitted_events_allows(
    client: httpx.Client, other: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    _name, sid = published(client, make_event_type, 10)
    # Nakadi: each batch is min(batch_limit, max_uncommitted_events - uncommitted).
    stream = Stream(client, sid, batch_limit=4, max_uncommitted_events=2, **FAST)
    first = stream.read_events(1)
    assert numbers(first) == ["0", "1"]
    paused = stream.batch()
    assert paused is not None and "events" not in paused, paused
    # Committed: two more may go, again as one batch of two, not of four.
    assert commit(other, sid, stream.id, [first[0]["cursor"]]).status_code == 204
    second = stream.read_events(1)
    assert numbers(second) == ["2", "3"]
    stream.close()


def test_events_filling_the_allowance_across_partitions_go_before_the_flush_timeout(
    client: httpx.Client, other: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = partitioned_type(make_event_type, 2)
    sid = create(client, [name], read_from="begin")["id"]
    publish(client, name, [order("a", "0"), order("b", "1")])
    started = time.monotonic()
    # One event waits in each partition: no batch of min(4, 2) fills, but together they are
    # all the allowance lets out before a commit, so both go at once rather than after 20 s.
    stream = Stream(client, sid, batch_limit=4, max_uncommitted_events=2, batch_flush_timeout=20)
    got = stream.read_events(2)
    assert time.monotonic() - started < 10
    assert sorted(numbers(got)) == ["a", "b"] and all(len(b["events"]) == 1 for b in got)
    assert commit(other, sid, stream.id, [b["cursor"] for b in got]).status_code == 204
    stream.close()


def test_a_commit_frees_room_for_a_whole_batch_of_one_partition(
    client: httpx.Client, other: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = partitioned_type(make_event_type, 4)
    sid = create(client, [name], read_from="begin")["id"]
    publish(client, name, [order(f"{p}-{i}", str(p)) for i in range(20) for p in range(4)])
    # Room for four batches of 5: each commit frees a whole batch's room, which goes to one
    # partition's next 5 events, not 1 or 2 from each of the four.
    stream = Stream(client, sid, batch_limit=5, max_uncommitted_events=20, **FAST)
    sizes: list[int] = []
    while sum(sizes) < 80:
        sizes.append(len(next_committed(stream, other, sid)))
    assert sizes == [5] * 16
    stream.close()


def test_a_quiet_partition_is_not_held_back_behind_a_busy_one(
    client: httpx.Client, other: httpx.Client, make_event_type: Callable[..., str]
) -> None:
    name = partitioned_type(make_event_type, 2)
    sid = create(client, [name], read_from="begin")["id"]
    busy = 1000
    publish(client, name, [order("quiet", "1"), *(order(f"busy-{i}", "0") for i in range(busy))])
    stream = Stream(client, sid, batch_limit=2, max_uncommitted_events=2, **FAST)
    # Partition 0 could fill every batch the allowance lets out, one commit at a time, for
    # far longer than a flush timeout; partition 1's one event goes out at its flush timeout.
    seen: list[str] = []
    while "quiet" not in seen:
        seen += next_committed(stream, other, sid)
    assert len(seen) < busy, "the quiet partition's event waited for the busy one to run dry"
    stream.close()
