"""The changeserver's /metrics and /status on its management port: ingest counters, the
slot's retained WAL, the change log's bounds, long-poll waiters and refusals, and the newest
snapshot's age, rows and the replay run's duration."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx

from changebroker.changeserver.sequence import Sequence
from changebroker.stack.processes import wait_until
from tests.support.changeserver import MakeServer
from tests.support.metrics import scrape
from tests.support.snapshots import write_snapshot

P = "changebroker_changeserver"


def test_metrics_move_with_ingest_long_polls_and_refusals(
    make_server: MakeServer, tmp_path: Path
) -> None:
    snapshots = tmp_path / "snapshots"
    cs = make_server(separate_management=True, metrics_interval=0.2, snapshots_dir=snapshots)
    assert httpx.get(f"{cs.url}/metrics").status_code == 404  # the management port's only
    before = scrape(f"{cs.mgmt_url}/metrics")
    for family in (
        "process_cpu_seconds",
        "process_resident_memory_bytes",
        "process_open_fds",
        "python_gc_collections",
        f"{P}_slot_retained_wal_bytes",
        f"{P}_replication_lag_bytes",
        f"{P}_replication_lag_seconds",
        f"{P}_changelog_bytes",
        f"{P}_changelog_first_lsn",
        f"{P}_changelog_last_lsn",
        f"{P}_longpoll_waiters",
    ):
        assert family in before.families, family

    # A long poll waits on its selector until a change for it is durable.
    answered: list[httpx.Response] = []
    poll = threading.Thread(target=lambda: answered.append(cs.get(scope="a", block=30)))
    poll.start()
    wait_until(
        lambda: scrape(f"{cs.mgmt_url}/metrics").value(f"{P}_longpoll_waiters") == 1,
        timeout=30,
        what="one long-poll waiter",
    )
    assert httpx.get(f"{cs.mgmt_url}/status").json()["waiters_by_selector"] == {"a": 1}
    cs.sql("INSERT INTO items VALUES (1, 'one', 'a'), (2, 'two', 'a'), (3, 'three', 'b')")
    poll.join(timeout=30)
    assert answered and answered[0].status_code == 200
    body = cs.wait_for(2, scope="a")

    def moved() -> bool:
        after = scrape(f"{cs.mgmt_url}/metrics")
        return after.value(f"{P}_changelog_last_lsn") == Sequence.parse(body["lastSequence"]).lsn

    wait_until(moved, timeout=30, what="the change log's bounds in /metrics")

    assert cs.get(scope="a", since="0.1.0").json()["code"] == "SNAPSHOT_TOO_OLD"
    cs.get(scope="NOT VALID")
    after = scrape(f"{cs.mgmt_url}/metrics")
    grew = {
        name: after.total(name) - before.total(name)
        for name in (
            f"{P}_changes_ingested_total",
            f"{P}_transactions_ingested_total",
            f"{P}_longpoll_wakeups_total",
        )
    }
    assert grew == {
        f"{P}_changes_ingested_total": 3,
        f"{P}_transactions_ingested_total": 1,
        f"{P}_longpoll_wakeups_total": 1,
    }
    assert after.total(f"{P}_ingested_bytes_total") > before.total(f"{P}_ingested_bytes_total")
    assert (
        after.value(f"{P}_refusals_total", code="SNAPSHOT_TOO_OLD")
        == (before.value(f"{P}_refusals_total", code="SNAPSHOT_TOO_OLD") or 0) + 1
    )
    assert after.value(f"{P}_longpoll_waiters") == 0
    assert (after.value(f"{P}_slot_retained_wal_bytes") or -1) >= 0
    assert (after.value(f"{P}_changelog_bytes") or 0) > 0
    assert after.value(f"{P}_replication_lag_bytes") is not None
    # Request durations, by route template and status.
    assert (
        after.total("http_server_request_duration_seconds_count", route="/changes", status="400")
        >= 2
    )
    assert (
        after.total("http_server_request_duration_seconds_count", route="/changes", status="200")
        >= 1
    )
    status = httpx.get(f"{cs.mgmt_url}/status").json()
    assert status["last_sequence"] == body["lastSequence"]
    assert status["slot_retained_wal_bytes"] >= 0

    # The newest snapshot, as its manifest tells (the replay run's duration included).
    assert not after.has(f"{P}_snapshot_age_seconds")
    write_snapshot(snapshots, cs.dsn, ["public.items"], body["lastSequence"], duration_seconds=7.5)
    wait_until(
        lambda: scrape(f"{cs.mgmt_url}/metrics").value(f"{P}_snapshot_duration_seconds") == 7.5,
        timeout=30,
        what="the snapshot's replay duration in /metrics",
    )
    found = scrape(f"{cs.mgmt_url}/metrics")
    assert found.value(f"{P}_snapshot_rows") == 3
    assert 0 <= (found.value(f"{P}_snapshot_age_seconds") or -1) < 60
    assert httpx.get(f"{cs.mgmt_url}/status").json()["snapshot_duration_seconds"] == 7.5
