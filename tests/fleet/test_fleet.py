"""A fleet of changeservers behind HAProxy while servers come and go: three servers, writers
committing all along, one server marked down and stopped, one SIGKILLed (and started again,
as the supervisor does), one new server added (seeded from a peer) and one restarted, in a
random order with random pauses. Every long-poller through the balancer sees every change
once, in commit order, without SNAPSHOT_TOO_OLD; the bridge reading through the balancer
publishes every row once. ``/markdown`` takes a server out of rotation within one check
interval, answers its parked long polls, and its slot is gone once it exits."""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from changebroker import pg
from changebroker.broker.app import create_app as broker_app
from changebroker.broker.settings import Settings as BrokerSettings
from changebroker.registry.app import create_app as registry_app
from changebroker.stack.loadbalancer import CHECK_INTERVAL
from changebroker.stack.processes import wait_until
from changebroker.stack.run import serve_in_thread
from tests.support.bridge_stack import Stack, rebuilding
from tests.support.fleet import (
    SELECTOR,
    TABLE,
    Fleet,
    Member,
    Poller,
    Writer,
    changeserver_fleet,
    order_problems,
)
from tests.support.snapshots import write_snapshot

pytestmark = pytest.mark.timeout(600)

# A fixed seed by default, another with CHANGEBROKER_FLEET_SEED: the order and pauses it
# chose are in the failure message.
SEED = int(os.environ.get("CHANGEBROKER_FLEET_SEED", "46"))


@pytest.fixture
def fleet(pg_dsn: str, tmp_path: Path, unique_name: Callable[[str], str]) -> Iterator[Fleet]:
    """Three servers in rotation and a fourth, not started, that joins later."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(TABLE)
    with changeserver_fleet(pg_dsn, tmp_path, unique_name, 3, 1) as started:
        yield started


def _pause(rng: random.Random) -> None:
    time.sleep(rng.uniform(0.5, 3.0))  # the schedule's random pause, not a wait for anything


def churn(fleet: Fleet, rng: random.Random) -> tuple[list[str], Member]:
    """The four events, in a random order with random pauses; what happened, and the server
    that was marked down and stopped."""
    retired, killed, restarted = rng.sample(fleet.members[:3], 3)
    added = fleet.members[3]

    def mark_down_and_stop() -> str:
        assert httpx.get(f"{retired.mgmt_url}/markdown", timeout=30).status_code == 200
        _pause(rng)
        retired.process.stop()
        return f"{retired.name} marked down and stopped"

    def kill() -> str:
        killed.process.kill()
        _pause(rng)
        killed.process.start(timeout=120)
        return f"{killed.name} killed and started again"

    def add() -> str:
        added.process.start(timeout=120)
        return f"{added.name} added"

    def restart() -> str:
        restarted.process.stop()
        restarted.process.start(timeout=120)
        return f"{restarted.name} restarted"

    events = [mark_down_and_stop, kill, add, restart]
    rng.shuffle(events)
    done = []
    for event in events:
        _pause(rng)
        done.append(event())
    return done, retired


def test_long_pollers_see_every_change_once_in_commit_order(fleet: Fleet) -> None:
    rng = random.Random(SEED)
    writers = [Writer(fleet.dsn, i, SEED) for i in (1, 2)]
    pollers = [Poller(fleet.url) for _ in range(4)]
    for each in (*writers, *pollers):
        each.start()
    wait_until(lambda: all(p.seen for p in pollers), timeout=30, what="every poller served")
    done, retired = churn(fleet, rng)
    _pause(rng)
    for writer in writers:
        writer.stop()
    committed = {row for writer in writers for row in writer.committed}
    wait_until(
        lambda: all(len(p.seen) >= len(committed) for p in pollers),
        timeout=90,
        what=f"every poller to see all {len(committed)} rows (seed {SEED}: {done})",
    )
    for poller in pollers:
        poller.stop()

    context = f"seed {SEED}: {done}"
    for i, poller in enumerate(pollers):
        assert order_problems(poller.seen, committed) == [], (i, context)
        assert not any("SNAPSHOT_TOO_OLD" in kind for kind in poller.failures), context
    assert all(p.seen == pollers[0].seen for p in pollers), context
    assert retired.slot not in fleet.slots(), context
    # The added server was seeded: it holds the fleet's history from the first change on.
    added = fleet.members[3]
    first = {m.status()["first_sequence"] for m in fleet.members if m is not retired}
    assert len(first) == 1, (first, context)
    since = str(pollers[0].seen[0][0])
    answer = httpx.get(f"{added.url}/changes", params={"scope": SELECTOR, "since": since})
    assert answer.status_code == 200, answer.text
    assert answer.json()["changes"][0]["sequence"] == str(pollers[0].seen[1][0])


def test_the_bridge_through_the_balancer_publishes_every_row_once(
    fleet: Fleet,
    pg_server_dsn: str,
    kafka_bootstrap: str,
    tmp_path: Path,
    unique_name: Callable[[str], str],
) -> None:
    rng = random.Random(SEED + 1)
    with pg.scratch_database(pg_server_dsn, "t_meta") as meta_dsn:
        registry = serve_in_thread(registry_app(meta_dsn))
        broker = serve_in_thread(
            broker_app(BrokerSettings(pg_dsn=meta_dsn, kafka_bootstrap=kafka_bootstrap))
        )
        with registry as registry_url, broker as broker_url:
            stack = Stack(
                app_dsn=fleet.dsn,
                meta_dsn=meta_dsn,
                kafka_bootstrap=kafka_bootstrap,
                changeserver_url=fleet.url,
                broker_url=broker_url,
                registry_url=registry_url,
                prefix=unique_name("cdc"),
                tmp=tmp_path,
                snapshots_dir=tmp_path / "snapshots",
                publication=fleet.publication,
            )
            stack.start_bridge()
            try:
                # Taken up (its snapshot, empty, done) before any row is written.
                def taken_up() -> bool:
                    unit = stack.status()["units"].get("public.fleet_rows") or {}
                    return (unit.get("snapshot") or {}).get("state") == "done"

                wait_until(taken_up, timeout=60, what="the bridge to take the table up")
                writers = [Writer(fleet.dsn, i, SEED) for i in (1, 2)]
                for writer in writers:
                    writer.start()
                done, _ = churn(fleet, rng)
                for writer in writers:
                    writer.stop()
                committed = sum(len(writer.committed) for writer in writers)
                with rebuilding(stack) as rebuilt:
                    wait_until(
                        lambda: rebuilt.equals_database(["public.fleet_rows"]),
                        timeout=120,
                        what=f"the bridge's events to equal the rows (seed {SEED + 1}: {done})",
                    )
                    events = [e for e in rebuilt.events if e["data_type"] == "public.fleet_rows"]
                    assert rebuilt.duplicate_eids() == [], done
                    # One event per row written, each a change: the table was empty when the
                    # bridge took it up, and no gap made it snapshot the table again.
                    assert [e["data_op"] for e in events] == ["C"] * committed, done
            finally:
                stack.stop_bridge()


def _access_lines(member: Member, path: str) -> int:
    log = member.process.log_path.read_text()
    return len(re.findall(rf"path={re.escape(path)} ", log))


def test_markdown_leaves_rotation_within_one_check_interval_and_drops_the_slot(
    pg_dsn: str, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(TABLE)
        conn.execute("INSERT INTO fleet_rows (writer, n) VALUES (1, 1)")
    snapshots = tmp_path / "snapshots"
    extra = ("--snapshots-dir", str(snapshots))
    with changeserver_fleet(pg_dsn, tmp_path, unique_name, 2, 0, *extra) as fleet:
        leaving, staying = fleet.members
        # /snapshots through the balancer: whichever server answers, the same rows.
        first = httpx.get(f"{fleet.url}/changes", params={"scope": SELECTOR}).json()
        write_snapshot(snapshots, pg_dsn, ["public.fleet_rows"], first["lastSequence"])
        for _ in range(4):
            served = httpx.get(f"{fleet.url}/snapshots", params={"selector": SELECTOR})
            assert served.status_code == 200, served.text
            assert [len(t["rows"]) for t in served.json()["tables"]] == [1]

        answers: list[int] = []
        params = {"scope": SELECTOR, "since": first["lastSequence"], "block": 60}

        def park() -> None:
            answers.append(
                httpx.get(f"{leaving.url}/changes", params=params, timeout=90).status_code
            )

        parked = [threading.Thread(target=park) for _ in range(3)]
        for thread in parked:
            thread.start()
        wait_until(
            lambda: leaving.status()["longpoll_waiters"] == 3, timeout=30, what="three parked polls"
        )
        marked = time.monotonic()
        assert httpx.get(f"{leaving.mgmt_url}/markdown").status_code == 200
        assert httpx.get(f"{leaving.mgmt_url}/ready").status_code == 503
        for thread in parked:
            thread.join(timeout=10)
        assert answers == [200, 200, 200]  # answered at once, not cut
        wait_until(
            lambda: not fleet.routed(leaving),
            timeout=10,
            what="the balancer to drop it",
            interval=0.02,
        )
        # One interval until the next check, plus its round trip and this test's own look
        # at HAProxy on a machine other work keeps busy.
        left_after = time.monotonic() - marked
        assert left_after <= CHECK_INTERVAL + 0.75, left_after

        before = _access_lines(leaving, "/changes")
        for _ in range(10):
            answer = httpx.get(f"{fleet.url}/changes", params={"scope": SELECTOR})
            assert answer.status_code == 200, answer.text
        assert _access_lines(leaving, "/changes") == before  # none reached it

        assert leaving.process.stop() == 0
        assert fleet.slots() == {staying.slot}

        # Started again, it is a new server: a new slot, its log seeded from the one that
        # stayed, back in rotation.
        leaving.process.start(timeout=120)
        assert fleet.slots() == {leaving.slot, staying.slot}
        assert leaving.status()["first_sequence"] == staying.status()["first_sequence"]
        wait_until(lambda: fleet.routed(leaving), timeout=10, what="it back in rotation")
