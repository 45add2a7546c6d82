"""The campaign's end-of-run check of /changes: what it excuses after a SNAPSHOT_TOO_OLD and
what it never does."""

from __future__ import annotations

from changebroker.chaos.workload import ChangesReader, Txn, Violations


def reader_that_saw(values: list[int], told_too_old_at: list[float]) -> ChangesReader:
    reader = ChangesReader("http://127.0.0.1:1", Violations())
    reader.seen = {v: ("chaos_a", v) for v in values}
    reader.too_old_at = told_too_old_at
    return reader


TXN = Txn(1, [("chaos_a", 11, 11), ("chaos_a", 12, 12)], True, done_at=10.0)


def test_part_of_a_transaction_before_a_snapshot_too_old_is_excused() -> None:
    # Its first page read, then SNAPSHOT_TOO_OLD: the reader started over after the gap.
    reader = reader_that_saw([11], told_too_old_at=[20.0])
    assert reader.check_end([TXN]) == (1, 1)
    assert reader.violations.found == []


def test_part_of_a_transaction_without_a_snapshot_too_old_after_it_is_a_violation() -> None:
    reader = reader_that_saw([11], told_too_old_at=[5.0])
    reader.check_end([TXN])
    assert [v.split(":")[0] for v in reader.violations.found] == [
        "VIOLATION whole transactions",
        "VIOLATION every committed change served",
    ]
