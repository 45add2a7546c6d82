"""ChangeFeed against real changeservers: a consumer killed at random points and restarted
from its stored position, one whose position retention dropped, one starting from a
snapshot, one over two changeservers losing one; each ends with exactly the table's rows."""

from __future__ import annotations

import asyncio
import logging
import math
import random
import signal
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from changebroker.client import (
    AsyncChangeFeed,
    Change,
    ChangeFeed,
    FilePositionStore,
    MemoryPositionStore,
    Operation,
    Position,
    PositionMismatch,
    SnapshotUnavailable,
    sequence_order,
)
from changebroker.stack.processes import wait_until
from tests.support.change_feeds import (
    FULL_OLD_ROWS,
    WANTED,
    Copy,
    Writer,
    fence,
    purge_before,
    row_id,
    selector_rows,
    write,
)
from tests.support.changeserver import Harness, MakeServer
from tests.support.feed_consumer import LIMIT
from tests.support.snapshots import write_snapshot

LAST_ID = 1_000_000  # the row inserted last: a consumer that has it has everything before


def _server(make_server: MakeServer, **overrides: Any) -> Harness:
    cs = make_server(**overrides)
    cs.sql(FULL_OLD_ROWS)
    return cs


def _is_last(item: Any) -> bool:
    return (
        isinstance(item, Change)
        and item.operation == Operation.INSERT
        and item.new_row is not None
        and row_id(item.new_row) == LAST_ID
    )


def _consume(flavour: str, urls: str | list[str], copy: Copy | None = None, **options: Any) -> Copy:
    """Apply a feed of the wanted selector to ``copy`` until the last row's insert, then
    leave the feed as a consumer done with its work does."""
    copy = copy or Copy()
    if flavour == "sync":
        with ChangeFeed(urls, [WANTED], block=1, **options) as feed:
            for item in feed:
                copy.apply(item)
                if _is_last(item):
                    break
        return copy

    async def consume() -> None:
        async with AsyncChangeFeed(urls, [WANTED], block=1, **options) as feed:
            async for item in feed:
                copy.apply(item)
                if _is_last(item):
                    break

    asyncio.run(consume())
    return copy


# -- killed and restarted -------------------------------------------------------------------


def _start_consumer(cs: Harness, tmp_path: Path, wire_format: str) -> subprocess.Popen[bytes]:
    args = [cs.url, WANTED, str(tmp_path / "position.json"), str(tmp_path / "copy.sqlite")]
    with open(tmp_path / "consumer.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.support.feed_consumer", *args, wire_format, str(LAST_ID)],
            stderr=log,
        )


def _copy_query(tmp_path: Path, sql: str) -> list[Any]:
    try:
        with sqlite3.connect(tmp_path / "copy.sqlite") as conn:
            return conn.execute(sql).fetchall()
    except sqlite3.OperationalError:  # the first consumer has not made its tables yet
        return []


def _applied(tmp_path: Path) -> int:
    return len(_copy_query(tmp_path, "SELECT sequence FROM applied"))


def _kill_after(consumer: subprocess.Popen[bytes], tmp_path: Path, changes: int) -> None:
    """SIGKILL the consumer once it has applied ``changes`` more."""
    target = _applied(tmp_path) + changes
    wait_until(
        lambda: _applied(tmp_path) >= target or consumer.poll() is not None,
        timeout=60,
        what=f"the consumer to apply {target} changes",
    )
    assert consumer.poll() is None, (tmp_path / "consumer.log").read_text()[-3000:]
    consumer.send_signal(signal.SIGKILL)
    assert consumer.wait(timeout=30) == -signal.SIGKILL


def test_a_consumer_killed_at_random_points_resumes_from_its_stored_position_and_ends_exact(
    cs: Harness, tmp_path: Path
) -> None:
    cs.sql(FULL_OLD_ROWS)
    rng = random.Random(49)
    kills = 8
    with Writer(cs.dsn, seed=49):
        for _ in range(kills):
            _kill_after(_start_consumer(cs, tmp_path, rng.choice(["json", "protobuf"])),
                        tmp_path, rng.randint(1, 3 * LIMIT))  # fmt: skip
    cs.sql("INSERT INTO items VALUES (%s, 'last', %s)", (LAST_ID, WANTED))
    final = _start_consumer(cs, tmp_path, "json")
    assert final.wait(timeout=120) == 0, (tmp_path / "consumer.log").read_text()[-3000:]

    assert dict(_copy_query(tmp_path, "SELECT id, name FROM rows")) == selector_rows(cs.dsn)
    # Every change of the selector was applied, none skipped...
    served = cs.changes(selector=WANTED, limit="100000")["changes"]
    applied = _copy_query(tmp_path, "SELECT sequence, run FROM applied")
    assert {s for s, _ in applied} == {c["sequence"] for c in served}
    # ...each restart started from the position stored before, never from the beginning...
    starts = [s for (s,) in _copy_query(tmp_path, "SELECT started_from FROM runs ORDER BY run")]
    assert len(starts) == kills + 1 and starts[0] is None and None not in starts[1:]
    assert starts[1:] == sorted(starts[1:], key=sequence_order)
    # ...and applied again at most the answer it was working on when it was killed.
    again = Counter(run for run, (s, _) in _reapplied(applied))
    assert all(count <= LIMIT for count in again.values()), again


def _reapplied(applied: list[tuple[str, int]]) -> list[tuple[int, tuple[str, int]]]:
    """(run, (sequence, run)) of each change a run applied that an earlier run had."""
    seen: set[str] = set()
    out = []
    for sequence, run in applied:
        if sequence in seen:
            out.append((run, (sequence, run)))
        seen.add(sequence)
    return out


# -- snapshots ------------------------------------------------------------------------------


@pytest.mark.parametrize(("flavour", "wire_format"), [("sync", "json"), ("async", "protobuf")])
def test_a_consumer_whose_position_retention_dropped_takes_the_snapshot_and_ends_exact(
    make_server: MakeServer, tmp_path: Path, flavour: str, wire_format: str
) -> None:
    snapshots = tmp_path / "snapshots"
    cs = _server(make_server, snapshots_dir=snapshots)
    rng = random.Random(7)
    next_id = write(cs.dsn, rng, 20)
    # Where a consumer stopped long ago.
    stopped_at = cs.wait_for(1, selector=WANTED)["changes"][0]["sequence"]
    store = FilePositionStore(tmp_path / "position.json")
    store.save(Position(stopped_at, (WANTED,)))
    next_id = write(cs.dsn, rng, 30, next_id)
    sequence = fence(cs, -1)
    snapshot_id = write_snapshot(snapshots, cs.dsn, ["public.items"], sequence)
    write(cs.dsn, rng, 30, next_id)
    purge_before(cs, sequence)
    assert cs.get(selector=WANTED, since=stopped_at).json()["code"] == "SNAPSHOT_TOO_OLD"
    cs.sql("INSERT INTO items VALUES (%s, 'last', %s)", (LAST_ID, WANTED))

    copy = _consume(flavour, cs.url, store=store, format=wire_format)

    assert copy.rows == selector_rows(cs.dsn)
    assert [(s.snapshot_id, s.sequence, s.reason) for s in copy.snapshots] == [
        (snapshot_id, sequence, "position too old")
    ]
    assert all(sequence_order(c.sequence) > sequence_order(sequence) for c in copy.changes)
    stored = store.load()
    assert stored is not None and stored.sequence == copy.changes[-1].sequence


def test_a_new_consumer_starts_from_the_snapshot_when_asked(
    make_server: MakeServer, tmp_path: Path
) -> None:
    snapshots = tmp_path / "snapshots"
    cs = _server(make_server, snapshots_dir=snapshots)
    rng = random.Random(11)
    next_id = write(cs.dsn, rng, 30)
    sequence = fence(cs, -1)
    snapshot_id = write_snapshot(snapshots, cs.dsn, ["public.items"], sequence)
    write(cs.dsn, rng, 20, next_id)
    cs.sql("INSERT INTO items VALUES (%s, 'last', %s)", (LAST_ID, WANTED))

    copy = _consume("sync", cs.url, start="snapshot", format="protobuf")

    assert copy.rows == selector_rows(cs.dsn)
    assert [(s.snapshot_id, s.reason) for s in copy.snapshots] == [(snapshot_id, "first start")]
    assert copy.changes and all(
        sequence_order(c.sequence) > sequence_order(sequence) for c in copy.changes
    )


def test_a_snapshot_older_than_the_change_log_is_waited_out_until_a_newer_one(
    make_server: MakeServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    snapshots = tmp_path / "snapshots"
    cs = _server(make_server, snapshots_dir=snapshots)
    rng = random.Random(13)
    next_id = write(cs.dsn, rng, 20)
    stale = write_snapshot(snapshots, cs.dsn, ["public.items"], fence(cs, -1))
    next_id = write(cs.dsn, rng, 20, next_id)
    purge_before(cs, fence(cs, -2))  # what came after the stale snapshot is gone
    copy = Copy()
    consumer = threading.Thread(
        target=_consume, args=("sync", cs.url, copy), kwargs={"start": "snapshot"}, daemon=True
    )
    with caplog.at_level(logging.WARNING, logger="changebroker.client"):
        consumer.start()
        wait_until(
            lambda: any(stale in r.getMessage() for r in caplog.records),
            timeout=30,
            what="the consumer to find the snapshot stale",
        )
    write(cs.dsn, rng, 10, next_id)
    fresh = write_snapshot(snapshots, cs.dsn, ["public.items"], fence(cs, -3))
    cs.sql("INSERT INTO items VALUES (%s, 'last', %s)", (LAST_ID, WANTED))
    consumer.join(timeout=120)

    assert not consumer.is_alive()
    assert [s.snapshot_id for s in copy.snapshots] == [fresh]
    assert copy.rows == selector_rows(cs.dsn)


def test_no_snapshot_to_start_from_says_so_once_snapshot_wait_has_passed(
    make_server: MakeServer, tmp_path: Path
) -> None:
    cs = _server(make_server, snapshots_dir=tmp_path / "snapshots")
    with pytest.raises(SnapshotUnavailable, match=r"no snapshot to start from.*run the replay"):
        _consume("sync", cs.url, start="snapshot", snapshot_wait=1.0)


# -- several changeservers ------------------------------------------------------------------


def test_a_consumer_of_two_changeservers_goes_on_when_one_stops_and_ends_exact(
    make_server: MakeServer,
) -> None:
    first, second = _server(make_server), make_server()  # both before any write
    copy = Copy()
    consumer = threading.Thread(
        target=_consume, args=("sync", [first.url, second.url], copy), daemon=True
    )
    with Writer(first.dsn, seed=5):
        consumer.start()
        wait_until(lambda: len(copy.changes) >= 50, timeout=60, what="50 changes")
        first.stop()
        applied = len(copy.changes)
        wait_until(lambda: len(copy.changes) >= applied + 50, timeout=60, what="50 more")
    first.sql("INSERT INTO items VALUES (%s, 'last', %s)", (LAST_ID, WANTED))
    consumer.join(timeout=120)

    assert not consumer.is_alive()
    assert copy.rows == selector_rows(first.dsn)
    sequences = [c.sequence for c in copy.changes]
    assert sequences == sorted(set(sequences), key=sequence_order)  # in order, none twice


def test_a_position_stored_for_other_selectors_is_refused(cs: Harness) -> None:
    store = MemoryPositionStore(Position("0.0.0", ("b",)))
    with pytest.raises(PositionMismatch, match=r"selectors \['b'\].*reads \['a'\]"):
        _consume("sync", cs.url, store=store)


# -- typed values ---------------------------------------------------------------------------

TYPED = {  # column: (type, value written, value handed out)
    "c_int2": ("int2", "-32768", -32768),
    "c_int8": ("int8", "-9223372036854775808", -(2**63)),
    "c_oid": ("oid", "4294967295", 4294967295),
    "c_float4": ("float4", "1.5", 1.5),
    "c_float8": ("float8", "-Infinity", -math.inf),
    "c_bool": ("bool", "f", False),
    "c_bytea": ("bytea", "\\x00ff10", b"\x00\xff\x10"),
    "c_numeric": ("numeric", "12345678901234567890.10", "12345678901234567890.10"),
    "c_timestamptz": ("timestamptz", "2024-01-02 03:04:05.5+02", "2024-01-02 01:04:05.5+00"),
    "c_text": ("text", 'héllo, "world"\n', 'héllo, "world"\n'),
    "c_jsonb": ("jsonb", '{"a": [1, null]}', '{"a": [1, null]}'),
}


def test_values_are_typed_alike_from_json_protobuf_and_snapshots(
    make_server: MakeServer, tmp_path: Path
) -> None:
    snapshots = tmp_path / "snapshots"
    cs = make_server(snapshots_dir=snapshots)
    columns = ", ".join(f"{name} {kind}" for name, (kind, _, _) in TYPED.items())
    cs.sql(f"CREATE TABLE typed (id int PRIMARY KEY, _change_selector text, {columns})")
    names, marks = ", ".join(TYPED), ", ".join(["%s"] * len(TYPED))
    written = [value for _, value, _ in TYPED.values()]
    cs.sql(f"INSERT INTO typed (id, _change_selector, {names}) VALUES (1, 't', {marks})", written)
    cs.sql("INSERT INTO typed (id, _change_selector) VALUES (2, 't')")
    sequence = cs.wait_for(2, selector="t")["lastSequence"]
    write_snapshot(snapshots, cs.dsn, ["public.typed"], sequence)

    def rows(**options: Any) -> list[dict[str, Any]]:
        found = []
        with ChangeFeed(cs.url, ["t"], block=1, **options) as feed:
            for item in feed:
                row = item.new_row if isinstance(item, Change) else getattr(item, "row", None)
                if row is not None:
                    found.append({name: column.value for name, column in row.items()})
                if len(found) == 2:
                    return found
        raise AssertionError("the feed ended")

    expected = {name: value for name, (_, _, value) in TYPED.items()}
    for found in (rows(format="json"), rows(format="protobuf"), rows(start="snapshot")):
        full, nulls = sorted(found, key=lambda row: row["id"])
        assert {name: full[name] for name in TYPED} == expected
        assert {name: nulls[name] for name in TYPED} == dict.fromkeys(TYPED)
