"""The changeserver's numbers read on a bounded interval (``Observed.refresh``): the
server's WAL position and the slot's retained WAL (one query to Postgres), the change log's
bounds and size, the newest snapshot. ``status()`` is the same reading as JSON, for the
console.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from changebroker import pg
from changebroker.changeserver.changelog import LogReader
from changebroker.changeserver.metrics import PREFIX
from changebroker.changeserver.snapshots import find_newest

if TYPE_CHECKING:
    from changebroker.changeserver.management import State
    from changebroker.changeserver.replication import Replicator


@dataclass(frozen=True)
class Source:
    """Where one change server's numbers are read from."""

    dsn: str
    slot: str
    changelog: Path
    max_age: float | None  # the change log's retention by age, reported as it is
    snapshots_dir: Path | None


@dataclass
class Reading:
    """What one refresh read; ``None`` where the source did not answer."""

    server_wal_lsn: int | None = None
    slot_restart_lsn: int | None = None
    slot_confirmed_lsn: int | None = None
    confirmed_lsn: int = 0  # what this server confirmed: durable, or nothing of ours before
    replication_lag_bytes: int | None = None
    replication_lag_seconds: float | None = None
    slot_retained_wal_bytes: int | None = None
    changelog_bytes: int = 0
    first_sequence: str = "0.0.0"
    last_sequence: str = "0.0.0"
    first_lsn: int = 0
    last_lsn: int = 0
    oldest_change_unix: float | None = None
    retention_seconds: float | None = None
    snapshot_id: str | None = None
    snapshot_age_seconds: float | None = None
    snapshot_rows: int | None = None
    snapshot_duration_seconds: float | None = None  # the replay run that wrote it
    read_at: float = 0.0


class Observed:
    """The interval-read numbers of one change server, and the collector that serves them."""

    def __init__(self, source: Source, replicator: Replicator, state: State) -> None:
        self.source = source
        self.replicator = replicator
        self.state = state
        self.reading = Reading()
        self._reader: LogReader | None = None  # its own: refreshes run off the event loop

    async def refresh(self) -> None:
        self.reading = await asyncio.to_thread(self._read)

    def _read(self) -> Reading:
        source, replicator = self.source, self.replicator
        reading = Reading(read_at=time.time(), retention_seconds=source.max_age)
        reading.confirmed_lsn = replicator.confirmed_lsn
        try:
            with pg.connect(source.dsn, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT pg_current_wal_lsn() - '0/0', restart_lsn - '0/0',"
                    " confirmed_flush_lsn - '0/0'"
                    " FROM (SELECT 1) one LEFT JOIN pg_replication_slots ON slot_name = %s",
                    (source.slot,),
                ).fetchone()
        except Exception:  # the database is away: the other numbers still count
            row = None
        if row is not None:
            wal, restart, confirmed = (None if v is None else int(v) for v in row)
            reading.server_wal_lsn, reading.slot_restart_lsn = wal, restart
            reading.slot_confirmed_lsn = confirmed
            if wal is not None:
                reading.replication_lag_bytes = max(0, wal - reading.confirmed_lsn)
                if restart is not None:
                    reading.slot_retained_wal_bytes = max(0, wal - restart)
        committed_at = replicator.durable_commit_unix
        if reading.replication_lag_bytes == 0:
            reading.replication_lag_seconds = 0.0
        elif reading.replication_lag_bytes is not None and committed_at is not None:
            # Behind: how old the newest change the log holds is (the server has WAL past it).
            reading.replication_lag_seconds = max(0.0, reading.read_at - committed_at)
        if self._reader is None:
            self._reader = LogReader(source.changelog)
        bounds = self._reader.bounds()
        reading.first_sequence, reading.last_sequence = str(bounds.first), str(bounds.last)
        reading.first_lsn, reading.last_lsn = bounds.first.lsn, bounds.last.lsn
        oldest = self._reader.oldest_commit_unix_us()
        reading.oldest_change_unix = None if oldest is None else oldest / 1_000_000
        reading.changelog_bytes = _size(source.changelog)
        if source.snapshots_dir is not None:
            _read_newest_snapshot(source.snapshots_dir, reading)
        return reading

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()

    def collect(self) -> Iterator[Metric]:
        r = self.reading
        waiters = self.state.waiters

        gauges = [
            (
                "replication_lag_bytes",
                "WAL bytes between the server's current position and what this changeserver"
                " confirmed (made durable, or found to hold nothing of its publication).",
                r.replication_lag_bytes,
            ),
            (
                "replication_lag_seconds",
                "While behind: the age of the newest change the change log holds; 0 caught up.",
                r.replication_lag_seconds,
            ),
            (
                "slot_retained_wal_bytes",
                "WAL the server keeps for the replication slot (current position - restart_lsn).",
                r.slot_retained_wal_bytes,
            ),
            ("changelog_bytes", "Size of the change log's files.", r.changelog_bytes),
            ("changelog_first_lsn", "Commit LSN of the oldest change held.", r.first_lsn),
            ("changelog_last_lsn", "Commit LSN of the newest change held.", r.last_lsn),
            (
                "changelog_oldest_change_timestamp_seconds",
                "Commit time (Unix) of the oldest transaction held.",
                r.oldest_change_unix,
            ),
            ("changelog_retention_seconds", "Retention by age (--max-age).", r.retention_seconds),
            ("longpoll_waiters", "Long polls waiting for changes now.", waiters.waiting),
            (
                "snapshot_age_seconds",
                "Age of the newest snapshot /snapshots serves.",
                r.snapshot_age_seconds,
            ),
            ("snapshot_rows", "Rows of the newest snapshot's tables.", r.snapshot_rows),
            (
                "snapshot_duration_seconds",
                "How long the replay run that wrote the newest snapshot took.",
                r.snapshot_duration_seconds,
            ),
            (
                "metrics_refreshed_timestamp_seconds",
                "When the numbers above (but waiters) were read.",
                r.read_at or None,
            ),
        ]
        for name, help_text, value in gauges:
            if value is not None:  # not known (yet): no sample rather than a made-up one
                family = GaugeMetricFamily(f"{PREFIX}_{name}", help_text)
                family.add_metric([], value)
                yield family

    def status(self) -> dict[str, Any]:
        """The reading as JSON, with the selectors most long polls wait on."""
        waiters = self.state.waiters
        return {
            **asdict(self.reading),
            # Which server of a fleet this is, and whether it takes traffic (its /ready).
            "slot": self.source.slot,
            "marked_down": self.state.marked_down,
            "streaming": self.replicator.streaming.is_set(),
            "longpoll_waiters": waiters.waiting,
            "waiters_by_selector": waiters.by_selector_counts(limit=20),
        }


def _size(path: Path) -> int:
    total = 0
    for suffix in ("", "-wal", "-shm"):
        try:
            total += path.with_name(path.name + suffix).stat().st_size
        except FileNotFoundError:
            continue
    return total


def _read_newest_snapshot(directory: Path, reading: Reading) -> None:
    found = find_newest(directory)
    if found is None:
        return
    reading.snapshot_id, manifest = found
    created = datetime.datetime.fromisoformat(manifest["created_at"])
    reading.snapshot_age_seconds = (datetime.datetime.now(datetime.UTC) - created).total_seconds()
    reading.snapshot_rows = sum(int(table["rows"]) for table in manifest["tables"].values())
    reading.snapshot_duration_seconds = manifest.get("duration_seconds")
