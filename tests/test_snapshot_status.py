"""``changebroker status --json``: the newest snapshot the changeserver serves, and its lag."""

from __future__ import annotations

import datetime
from pathlib import Path

import psycopg

from changebroker.stack.local import newest_snapshot
from tests.support.snapshots import write_snapshot


def test_the_newest_snapshot_with_its_rows_age_and_lag_behind_the_bridge(
    pg_dsn: str, tmp_path: Path
) -> None:
    directory = tmp_path / "snapshots"
    assert newest_snapshot(directory, "1.0.0") is None
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE a (id int PRIMARY KEY, _change_selector text)")
        conn.execute("CREATE TABLE b (id int PRIMARY KEY)")
        conn.execute("INSERT INTO a SELECT g, 'x' FROM generate_series(1, 5) g")
        conn.execute("INSERT INTO b SELECT g FROM generate_series(1, 3) g")
    hour_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    write_snapshot(directory, pg_dsn, ["public.a"], "0.10.0", when=hour_ago)
    later = hour_ago + datetime.timedelta(minutes=30)
    newest = write_snapshot(
        directory, pg_dsn, ["public.a", "public.b"], "1.20.3", when=later, duration_seconds=42.5
    )

    found = newest_snapshot(directory, "1.a0.0")

    assert found is not None
    assert found["id"] == newest
    assert found["rows"] == 8 and found["tables"] == 2
    assert found["duration_seconds"] == 42.5
    assert 1800 <= found["age_seconds"] < 3600
    assert found["changeserver_sequence"] == "1.20.3"
    assert found["lag_bytes_behind_bridge"] == 0xA0 - 0x20
    assert newest_snapshot(directory, None)["lag_bytes_behind_bridge"] is None  # type: ignore[index]
