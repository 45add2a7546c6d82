"""A fleet of ``changebroker changeserver`` processes behind HAProxy, as ``changebroker up
--changeservers N`` runs it: each server with its own slot and change log, one publication,
every server's peers named by ``--seed-from``; plus clients that long-poll it and write to
it while servers come and go."""

from __future__ import annotations

import collections
import contextlib
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg

from changebroker.changeserver.sequence import Sequence
from changebroker.stack.loadbalancer import LoadBalancer
from changebroker.stack.processes import free_port, wait_until
from changebroker.stack.run import CliProcess, changeserver_process
from changebroker.state import StateDir

SELECTOR = "fleet"
TABLE = (
    "CREATE TABLE fleet_rows (writer int, n int, _change_selector text NOT NULL DEFAULT"
    f" '{SELECTOR}', PRIMARY KEY (writer, n))"
)


@dataclass
class Member:
    name: str  # as the load balancer names it
    slot: str
    process: CliProcess
    api: int
    mgmt: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api}"

    @property
    def mgmt_url(self) -> str:
        return f"http://127.0.0.1:{self.mgmt}"

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(f"{self.mgmt_url}/status", timeout=30).json()
        return body


@dataclass
class Fleet:
    dsn: str
    publication: str
    members: list[Member]
    balancer: LoadBalancer

    @property
    def url(self) -> str:
        return self.balancer.changeserver_url

    def slots(self) -> set[str]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            query = "SELECT slot_name::text FROM pg_replication_slots WHERE database = %s"
            return {slot for (slot,) in conn.execute(query, (conn.info.dbname,)).fetchall()}

    def routed(self, member: Member) -> bool:
        """Whether HAProxy sends ``member`` requests now."""
        return self.balancer.servers()[member.name] == "UP"


@contextlib.contextmanager
def changeserver_fleet(
    dsn: str,
    tmp: Path,
    unique_name: Callable[[str], str],
    count: int,
    spare: int = 0,
    *extra: str,
) -> Iterator[Fleet]:
    """``count`` servers started together (a new fleet: none has history, each starts at
    its own slot), behind HAProxy with ``spare`` more that a test starts later (each seeded
    from the others); all stopped at the end."""
    publication = unique_name("fleet")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE PUBLICATION {publication} FOR ALL TABLES")
    members = []
    for i in range(1, count + spare + 1):
        slot = unique_name(f"fleet{i}")
        state = tmp / f"changeserver-{i}"
        state.mkdir()
        process, api, mgmt = changeserver_process(dsn, state, slot, "--publication", publication)
        process.args += extra
        members.append(Member(f"changeserver-{i}", slot, process, api, mgmt))
    for i, member in enumerate(members):
        # The first ``count`` seed from each other only: a spare not started yet would make
        # a new fleet's servers wait for it (an unreachable peer may hold history).
        peers = members[:count] if i < count else members
        urls = ",".join(peer.mgmt_url for peer in peers if peer is not member)
        member.process.args += ["--seed-from", urls, "--seed-timeout", "60s"]
    balancer = LoadBalancer(
        StateDir(tmp / "loadbalancer"),
        free_port(),
        [],
        changeserver_port=free_port(),
        changeservers=[(m.api, m.mgmt) for m in members],
    )
    with contextlib.ExitStack() as exits:
        for member in members:
            exits.callback(member.process.stop)
        exits.callback(balancer.stop)
        starting = [threading.Thread(target=m.process.start) for m in members[:count]]
        for thread in starting:
            thread.start()
        for thread in starting:
            thread.join()
        balancer.start()
        fleet = Fleet(dsn, publication, members, balancer)
        wait_until(
            lambda: all(fleet.routed(m) for m in members[:count]),
            timeout=30,
            what="every server in rotation",
        )
        yield fleet


class Writer(threading.Thread):
    """Commits transactions of one to three rows until stopped; ``committed`` in order."""

    def __init__(self, dsn: str, writer: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.writer = dsn, writer
        self.rng = random.Random(seed * 100 + writer)
        self.committed: list[tuple[int, int]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn) as conn:
            n = 0
            while not self.stopping.is_set():
                rows = [(self.writer, n + i) for i in range(self.rng.randint(1, 3))]
                n += len(rows)
                with conn.cursor() as cursor:
                    cursor.executemany("INSERT INTO fleet_rows (writer, n) VALUES (%s, %s)", rows)
                conn.commit()
                self.committed += rows
                self.stopping.wait(self.rng.uniform(0.005, 0.03))

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=30)


class Poller(threading.Thread):
    """A transicator client through the load balancer: long polls from the beginning, each
    next one from the answer's ``lastSequence``; it tries again after any failure."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.seen: list[tuple[Sequence, tuple[int, int]]] = []
        self.failures: collections.Counter[str] = collections.Counter()
        self.stopping = threading.Event()

    def run(self) -> None:
        since = "0.0.0"
        with httpx.Client(timeout=30) as client:
            while not self.stopping.is_set():
                params: dict[str, str | int] = {
                    "scope": SELECTOR,
                    "since": since,
                    "block": 2,
                    "limit": 50,
                }
                try:
                    response = client.get(f"{self.url}/changes", params=params)
                except httpx.HTTPError as error:
                    self.failures[type(error).__name__] += 1
                    self.stopping.wait(0.1)
                    continue
                if response.status_code != 200:
                    body = response.json() if "json" in response.headers["content-type"] else {}
                    self.failures[f"{response.status_code} {body.get('code', '')}"] += 1
                    self.stopping.wait(0.1)
                    continue
                body = response.json()
                for change in body["changes"]:
                    row = change["newRow"]
                    key = (int(row["writer"]["value"]), int(row["n"]["value"]))
                    self.seen.append((Sequence.parse(change["sequence"]), key))
                since = body["lastSequence"]

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=30)


def order_problems(seen: list[tuple[Sequence, tuple[int, int]]], committed: set[Any]) -> list[str]:
    """What is wrong with one client's changes: out of sequence order, a row twice or
    missing or never written, a writer's rows out of its commit order."""
    problems = []
    sequences = [sequence for sequence, _ in seen]
    if sequences != sorted(set(sequences)):
        problems.append("sequences not strictly increasing")
    rows = [row for _, row in seen]
    twice = [row for row, times in collections.Counter(rows).items() if times > 1]
    if twice:
        problems.append(f"{len(twice)} rows twice, e.g. {twice[:3]}")
    missing = committed - set(rows)
    if missing:
        problems.append(f"{len(missing)} committed rows missing, e.g. {sorted(missing)[:3]}")
    if set(rows) - committed:
        problems.append("rows never committed")
    last: dict[int, int] = {}
    for writer, n in rows:
        if n <= last.get(writer, -1):
            problems.append(f"writer {writer}'s row {n} after {last[writer]}")
        last[writer] = n
    return problems
