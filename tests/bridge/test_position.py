"""The position a batch changes is a copy: the committed one (what status reports, what a
transaction under way writes) never sees a later batch's changes, and a batch copies only
the units it touches, not every unit the bridge ever published (dropped tables included)."""

from __future__ import annotations

from changebroker.bridge.position import Position, Progress
from changebroker.bridge.snapshots import Run
from changebroker.changeserver.sequence import Sequence


def _position(units: int) -> Position:
    position = Position(Sequence(10, 0))
    for n in range(units):
        position.progress[f"public.t{n}"] = Progress(f"cdc.public.t{n}", "a.1.0", 5, 1)
        position.snapshots[f"public.t{n}"] = Run(f"run{n}", "2026-11-29T00:00:00Z")
    return position


def test_a_copys_changes_leave_the_original_as_it_was() -> None:
    committed = _position(3)
    before = committed.as_json()
    batch = committed.copy()
    progress = batch.own("public.t1")
    progress.events += 10
    batch.snapshots["public.t1"].rows_read += 100
    batch.own("public.new").events = 1
    batch.since = Sequence(11, 0)
    assert committed.as_json() == before
    assert batch != committed
    record = batch.as_json()
    assert record["progress"]["public.t1"]["events"] == 15
    assert record["snapshots"]["public.t1"]["rows_read"] == 100
    assert record["progress"]["public.new"]["events"] == 1
    # Owned once per copy: a second use changes the same object.
    assert batch.own("public.t1") is progress


def test_a_batch_copies_only_the_units_it_touches() -> None:
    committed = _position(100)
    batch = committed.copy()
    batch.own("public.t0").events += 1
    untouched = [f"public.t{n}" for n in range(1, 100)]
    assert all(batch.progress[u] is committed.progress[u] for u in untouched)
    assert all(batch.snapshots[u] is committed.snapshots[u] for u in untouched)
    assert batch.progress["public.t0"] is not committed.progress["public.t0"]


def test_an_unchanged_copy_equals_its_original() -> None:
    committed = _position(3)
    assert committed.copy() == committed
    touched = committed.copy()
    touched.own("public.t2")  # owned, not changed: still the same position
    assert touched == committed


def test_a_unit_dropped_and_created_again_in_one_batch_starts_from_nothing() -> None:
    """DROP TABLE then CREATE and INSERT under the same name, all in one batch: the new
    table's first change owns a fresh Progress (it failed the session over and over with a
    KeyError while the dropped unit stayed marked as owned)."""
    committed = _position(2)
    batch = committed.copy()
    batch.own("public.t1").events += 1
    batch.forget("public.t1")
    assert "public.t1" not in batch.progress and "public.t1" not in batch.snapshots
    assert batch.own("public.t1") == Progress()
    assert committed.progress["public.t1"].events == 5  # the committed one as it was
