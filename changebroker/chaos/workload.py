"""The campaign's workload, each part also a checker of what it saw.

- ``Writers``: Postgres transactions of 1 to 4 inserts and updates over three tables; every
  row version has a value ``v`` no other has, so each served change names one write.
- ``Ddl``: what the history must survive, now and then: TRUNCATE of one table, ADD COLUMN
  with a default and RENAME COLUMN of another.
- ``ChangesReader``: long-polls ``/changes``; a change served twice, out of commit order, with
  a value never written, or missing at the end without a SNAPSHOT_TOO_OLD, is a violation.
  Told SNAPSHOT_TOO_OLD (a gap, or a TRUNCATE or ALTER TABLE of its tables), it goes on
  from the newest change, as a client that took a snapshot would.
- ``Publishers``: Nakadi batches to both broker processes; what a 200 or a 207 says was
  stored must be readable at the end, and what a 207 says was not stored must not be.
- ``SubscriptionReader`` and ``StreamReader``: a subscription that commits, and a low-level
  stream; offsets must only go forward, committed cursors never back.
"""

from __future__ import annotations

import datetime
import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg

from changebroker.broker.event_types.examples import order_received
from changebroker.changeserver.sequence import Sequence

log = logging.getLogger(__name__)

TABLES = ("chaos_a", "chaos_b", "chaos_c")
SELECTOR = "chaos"
EVENT_TYPE = "chaos-orders"
_WRITER_SPAN = 1_000_000_000  # v = writer * span + n: a writer's values increase with its commits


@dataclass
class Violations:
    """Every broken invariant, printed as it is found: what was expected, what was seen."""

    found: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, invariant: str, expected: str, seen: str) -> None:
        line = f"VIOLATION {invariant}: expected {expected}; seen {seen}"
        with self._lock:
            self.found.append(line)
        print(line, flush=True)


class Worker(threading.Thread):
    """A loop that survives every fault: errors are counted, then it tries again."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.stopping = threading.Event()
        self.errors = 0

    def step(self) -> None:
        raise NotImplementedError

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.step()
            except Exception as error:  # a fault under way: count, breathe, go on
                self.errors += 1
                log.debug("workload step failed", exc_info=error)
                self.stopping.wait(0.5)

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=60)

    def batches(self, response: httpx.Response) -> Iterator[dict[str, Any]]:
        """A stream's batches (keep-alive lines skipped) until the stream ends or we stop."""
        for line in response.iter_lines():
            if self.stopping.is_set():
                return
            if line:
                yield json.loads(line)


def setup_tables(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in TABLES:
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {table} (id bigint PRIMARY KEY, v bigint NOT NULL,"
                f" _change_selector text NOT NULL DEFAULT '{SELECTOR}')"
            )


@dataclass
class Txn:
    writer: int
    rows: list[tuple[str, int, int]]  # (table, id, v)
    certain: bool  # False: the connection broke during COMMIT, it may or may not have happened
    done_at: float  # monotonic, when COMMIT returned (or failed)


class Writer(Worker):
    def __init__(self, index: int, dsn: str, seed: int, log_: list[Txn]) -> None:
        super().__init__(f"writer-{index}")
        self.index, self.dsn = index, dsn
        self.rng = random.Random(seed * 1000 + index)
        self.txns = log_
        self.n = 0
        self.ids: dict[str, list[int]] = {t: [] for t in TABLES}
        self._conn: psycopg.Connection[Any] | None = None

    def _value(self) -> int:
        self.n += 1
        return self.index * _WRITER_SPAN + self.n

    def step(self) -> None:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.dsn, connect_timeout=5)
        conn = self._conn
        rows: list[tuple[str, int, int]] = []
        new_ids: list[tuple[str, int]] = []
        try:
            for _ in range(self.rng.randint(1, 4)):
                table = self.rng.choice(TABLES)
                v = self._value()
                known = self.ids[table]
                if known and self.rng.random() < 0.5:
                    row_id = self.rng.choice(known)
                    updated = conn.execute(f"UPDATE {table} SET v = %s WHERE id = %s", (v, row_id))
                    if updated.rowcount == 0:  # truncated (Ddl): no change to expect
                        known.remove(row_id)
                        continue
                else:
                    row_id = v  # unique too
                    conn.execute(f"INSERT INTO {table} (id, v) VALUES (%s, %s)", (row_id, v))
                    new_ids.append((table, row_id))
                rows.append((table, row_id, v))
        except Exception:
            conn.close()
            raise
        try:
            conn.commit()
        except Exception:
            conn.close()
            self.txns.append(Txn(self.index, rows, False, time.monotonic()))
            raise
        self.txns.append(Txn(self.index, rows, True, time.monotonic()))
        for table, row_id in new_ids:
            self.ids[table].append(row_id)
        self.stopping.wait(0.02)


class Ddl(Worker):
    """Every ``every`` seconds one DDL, in turn: TRUNCATE ``chaos_c``, ADD COLUMN ... DEFAULT
    to ``chaos_b``, RENAME that column. The bridge's events must still equal the tables (all
    their columns), and ``/changes`` readers are told SNAPSHOT_TOO_OLD."""

    def __init__(self, dsn: str, every: float) -> None:
        super().__init__("ddl")
        self.dsn, self.every = dsn, every
        self.done: list[str] = []
        self._added: str | None = None

    def step(self) -> None:
        if self.stopping.wait(self.every):
            return
        turn = len(self.done) % 3
        if turn == 0:
            statement = "TRUNCATE chaos_c"
        elif turn == 1 or self._added is None:
            self._added = f"extra_{len(self.done)}"
            statement = f"ALTER TABLE chaos_b ADD COLUMN {self._added} text DEFAULT 'filled'"
        else:
            statement = f"ALTER TABLE chaos_b RENAME COLUMN {self._added} TO {self._added}_r"
            self._added = None
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(statement)
        self.done.append(statement)


class ChangesReader(Worker):
    """``/changes`` of the workload's selector, from the beginning, checked as it comes."""

    def __init__(self, url: str, violations: Violations) -> None:
        super().__init__("changes-reader")
        self.url, self.violations = url, violations
        self.since = "0.0.0"
        self.seen: dict[int, tuple[str, int]] = {}  # v -> (table, id)
        self.last_of_writer: dict[int, int] = {}
        # What was read since the last start over: after a SNAPSHOT_TOO_OLD a client
        # starts over, and another server of a fleet may serve it what it read before.
        self.since_start: set[int] = set()
        self.too_old_at: list[float] = []  # monotonic times we were told SNAPSHOT_TOO_OLD
        self.client = httpx.Client(timeout=30)

    def step(self) -> None:
        params: dict[str, str | int] = {
            "scope": SELECTOR,
            "since": self.since,
            "limit": 500,
            "block": 2,
        }
        response = self.client.get(f"{self.url}/changes", params=params)
        if response.status_code == 400 and response.json().get("code") == "SNAPSHOT_TOO_OLD":
            # On from the newest change, as after a snapshot; what came before is excused.
            bounds = self.client.get(f"{self.url}/changes", params={"scope": SELECTOR, "limit": 0})
            bounds.raise_for_status()
            self.since = bounds.json()["lastSequence"]
            self.too_old_at.append(time.monotonic())
            self.since_start.clear()
            self.last_of_writer.clear()
            return
        response.raise_for_status()
        for change in response.json()["changes"]:
            self._check(change)

    def _check(self, change: dict[str, Any]) -> None:
        sequence = change["sequence"]
        if Sequence.parse(sequence) <= Sequence.parse(self.since):
            self.violations.add("changes in order", f"a sequence after {self.since}", sequence)
        self.since = sequence
        row = change.get("newRow") or {}
        v, row_id = int(row["v"]["value"]), int(row["id"]["value"])
        table = change["table"].rsplit(".", 1)[-1]
        if v in self.since_start:
            self.violations.add("changes exactly once", f"v={v} once", f"again at {sequence}")
        self.since_start.add(v)
        self.seen[v] = (table, row_id)
        writer = v // _WRITER_SPAN
        if v <= self.last_of_writer.get(writer, 0):
            self.violations.add(
                "changes in commit order",
                f"writer {writer}'s values increasing",
                f"v={v} after v={self.last_of_writer[writer]}",
            )
        self.last_of_writer[writer] = max(v, self.last_of_writer.get(writer, 0))

    def check_end(self, txns: list[Txn]) -> tuple[int, int]:
        """Every committed write served (or excused by a SNAPSHOT_TOO_OLD after it), whole
        transactions only, the right rows; returns (changes checked, changes excused).

        A transaction may come in two pages (``limit``); when the reader is told
        SNAPSHOT_TOO_OLD between them, it starts over after the gap and never reads the rest:
        a part seen is then excused too, as the consumer knows its view is incomplete."""
        last_gap = max(self.too_old_at, default=-1.0)
        checked = excused = 0
        for txn in txns:
            present = [v for _, _, v in txn.rows if v in self.seen]
            if present and len(present) != len(txn.rows) and txn.done_at >= last_gap:
                self.violations.add(
                    "whole transactions",
                    f"all or none of {[v for _, _, v in txn.rows]}",
                    f"only {present}",
                )
            for table, row_id, v in txn.rows:
                if v in self.seen:
                    checked += 1
                    if self.seen[v] != (table, row_id):
                        seen = str(self.seen[v])
                        self.violations.add("right values", f"{table} id {row_id}", seen)
                elif txn.done_at < last_gap:
                    excused += 1
                elif txn.certain:
                    self.violations.add(
                        "every committed change served",
                        f"v={v} ({table} id {row_id}) in /changes",
                        "never served, and no SNAPSHOT_TOO_OLD after its commit",
                    )
        return checked, excused


def event_type_body() -> dict[str, Any]:
    return order_received(EVENT_TYPE, "chaos", partitions=4)


class Publisher(Worker):
    def __init__(self, index: int, urls: list[str], acked: set[str], refused: set[str]) -> None:
        super().__init__(f"publisher-{index}")
        self.index, self.urls = index, urls
        self.acked, self.refused = acked, refused
        self.n = 0
        self.client = httpx.Client(timeout=15)

    def step(self) -> None:
        url = self.urls[self.n % len(self.urls)]
        events: list[dict[str, Any]] = []
        eids: list[str] = []
        for _ in range(5):
            self.n += 1
            eids.append(str(uuid.uuid4()))
            events.append(
                {
                    "order_number": f"{self.index}-{self.n}",
                    "metadata": {
                        "eid": eids[-1],
                        "occurred_at": datetime.datetime.now(datetime.UTC).isoformat(),
                    },
                }
            )
        response = self.client.post(f"{url}/event-types/{EVENT_TYPE}/events", json=events)
        if response.status_code == 200:
            self.acked.update(eids)
        elif response.status_code == 207:
            for eid, item in zip(eids, response.json(), strict=True):
                stored = item["publishing_status"] == "submitted"
                (self.acked if stored else self.refused).add(eid)
        self.stopping.wait(0.05)


def _offset(cursor: dict[str, Any]) -> int:
    """The Kafka offset in ``001-0001-<offset>`` (``-1``: before the first event)."""
    return int(str(cursor["offset"]).split("-", 2)[2])


class SubscriptionReader(Worker):
    """Reads a subscription from the beginning and commits every batch."""

    def __init__(self, url: str, violations: Violations) -> None:
        super().__init__("subscription-reader")
        self.url, self.violations = url, violations
        self.subscription: str | None = None
        self.seen: set[str] = set()
        self.committed: dict[str, int] = {}  # partition -> offset the server last showed
        self._checked_at = 0.0
        self.client = httpx.Client(base_url=url, timeout=30)

    def step(self) -> None:
        if self.subscription is None:
            body = {
                "owning_application": "chaos",
                "event_types": [EVENT_TYPE],
                "read_from": "begin",
                "consumer_group": "chaos",
            }
            response = self.client.post("/subscriptions", json=body)
            response.raise_for_status()
            self.subscription = response.json()["id"]
        params = {"batch_limit": 500, "batch_flush_timeout": 1, "stream_timeout": 20}
        path = f"/subscriptions/{self.subscription}/events"
        with self.client.stream("GET", path, params=params) as response:
            response.raise_for_status()
            stream_id = response.headers["X-Nakadi-StreamId"]
            for batch in self.batches(response):
                for event in batch.get("events") or []:
                    self.seen.add(event["metadata"]["eid"])
                if batch.get("events"):
                    self.client.post(
                        f"/subscriptions/{self.subscription}/cursors",
                        json={"items": [batch["cursor"]]},
                        headers={"X-Nakadi-StreamId": stream_id},
                    ).raise_for_status()
                    if time.monotonic() - self._checked_at > 5:
                        self._checked_at = time.monotonic()
                        self.check_cursors()

    def check_cursors(self) -> None:
        response = self.client.get(f"/subscriptions/{self.subscription}/cursors")
        if response.status_code != 200:
            return
        for cursor in response.json()["items"]:
            partition, offset = cursor["partition"], _offset(cursor)
            before = self.committed.get(partition, -1)
            if offset < before:
                self.violations.add(
                    "committed cursors never go back",
                    f"partition {partition} at {before} or later",
                    str(offset),
                )
            self.committed[partition] = max(offset, before)


class StreamReader(Worker):
    """The low-level stream, resumed from its own cursors: offsets only go forward."""

    def __init__(self, url: str, violations: Violations) -> None:
        super().__init__("stream-reader")
        self.violations = violations
        self.cursors: dict[str, int] = {}
        self.seen: set[str] = set()
        self.client = httpx.Client(base_url=url, timeout=30)

    def step(self) -> None:
        headers = {}
        if self.cursors:
            cursors = [
                {"partition": p, "offset": f"001-0001-{o:018d}"} for p, o in self.cursors.items()
            ]
            headers["X-Nakadi-Cursors"] = json.dumps(cursors)
        params = {"batch_limit": 50, "batch_flush_timeout": 1, "stream_timeout": 20}
        path = f"/event-types/{EVENT_TYPE}/events"
        with self.client.stream("GET", path, params=params, headers=headers) as response:
            response.raise_for_status()
            for batch in self.batches(response):
                events = batch.get("events") or []
                partition, offset = batch["cursor"]["partition"], _offset(batch["cursor"])
                before = self.cursors.get(partition, -1)
                if events and offset <= before:
                    self.violations.add(
                        "stream offsets go forward",
                        f"partition {partition} after {before}",
                        str(offset),
                    )
                for event in events:
                    self.seen.add(event["metadata"]["eid"])
                if events:
                    self.cursors[partition] = max(offset, before)


def read_events(url: str, event_type: str) -> list[dict[str, Any]]:
    """Every event of ``event_type`` from the beginning up to each partition's newest offset
    when the read began (each partition in offset order)."""
    events: list[dict[str, Any]] = []
    params = {"batch_limit": 1000, "batch_flush_timeout": 1, "stream_timeout": 600}
    with httpx.Client(base_url=url, timeout=60) as client:
        partitions = client.get(f"/event-types/{event_type}/partitions")
        if partitions.status_code == 404:
            return []
        partitions.raise_for_status()
        ends = {
            p["partition"]: _offset({"offset": p["newest_available_offset"]})
            for p in partitions.json()
        }
        pending = {partition for partition, end in ends.items() if end >= 0}
        if not pending:
            return []
        cursors = [{"partition": p, "offset": "BEGIN"} for p in ends]
        headers = {"X-Nakadi-Cursors": json.dumps(cursors)}
        path = f"/event-types/{event_type}/events"
        with client.stream("GET", path, params=params, headers=headers) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if not line:
                    continue
                batch = json.loads(line)
                events += batch.get("events") or []
                partition = batch["cursor"]["partition"]
                if _offset(batch["cursor"]) >= ends[partition]:
                    pending.discard(partition)
                if not pending:
                    break
    return events
