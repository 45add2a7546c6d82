"""Load while an event type changes under it: publishers that number their events, a
subscription consumer that commits every batch, and the check that every acknowledged event
was read exactly once, in each partition in the order its publisher published it."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

from changebroker.stack.processes import wait_until
from tests.broker.subscription_support import Stream, commit

OCCURRED = "2026-11-23T10:00:00Z"


@dataclass(frozen=True)
class Read:
    partition: str
    offset: str  # the batch cursor's: where in which timeline
    eid: str
    number: str  # "<publisher>:<sequence>"


@dataclass
class Publishers:
    """``count`` threads publishing ``batch`` numbered orders a request, round robin over the
    broker ``urls``, until :meth:`stop`."""

    urls: Sequence[str]
    name: str
    count: int = 2
    batch: int = 5
    attempted: set[str] = field(default_factory=set)
    acknowledged: dict[str, str] = field(default_factory=dict)  # eid -> number
    refused: Counter[int] = field(default_factory=Counter)  # status -> requests
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Publishers:
        for index in range(self.count):
            thread = threading.Thread(target=self._run, args=(index,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _run(self, index: int) -> None:
        sequence = 0
        clients = [httpx.Client(base_url=url, timeout=60) for url in self.urls]
        try:
            turn = 0
            while not self._stop.is_set():
                numbered = []
                for _ in range(self.batch):
                    numbered.append((str(uuid.uuid4()), f"{index}:{sequence:06d}"))
                    sequence += 1
                events = [
                    {"order_number": number, "metadata": {"eid": eid, "occurred_at": OCCURRED}}
                    for eid, number in numbered
                ]
                with self._lock:
                    self.attempted.update(eid for eid, _ in numbered)
                client = clients[turn % len(clients)]
                turn += 1
                answer = client.post(f"/event-types/{self.name}/events", json=events)
                with self._lock:
                    if answer.status_code == 200:
                        self.acknowledged.update(numbered)
                    else:
                        self.refused[answer.status_code] += 1
        finally:
            for client in clients:
                client.close()

    def acked(self) -> int:
        with self._lock:
            return len(self.acknowledged)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)


@dataclass
class Consumer:
    """A subscription's consumer in a thread: reads batches, commits each one before the
    next, and opens the stream again when the server ends it."""

    url: str
    subscription_id: str
    reads: list[Read] = field(default_factory=list)
    streams: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Consumer:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            while not self._stop.is_set():
                stream = Stream(
                    client,
                    self.subscription_id,
                    batch_flush_timeout=1,
                    batch_limit=50,
                    max_uncommitted_events=500,
                    stream_timeout=60,
                )
                if stream.status_code == 409:  # the last stream's session is still closing
                    continue
                assert stream.status_code == 200, stream.response.text
                self.streams += 1
                try:
                    while not self._stop.is_set():
                        batch = stream.batch()
                        if batch is None:
                            break
                        if not batch.get("events"):
                            continue
                        cursor = batch["cursor"]
                        with self._lock:
                            self.reads += [
                                Read(
                                    cursor["partition"],
                                    cursor["offset"],
                                    e["metadata"]["eid"],
                                    e["order_number"],
                                )
                                for e in batch["events"]
                            ]
                        answer = commit(client, self.subscription_id, stream.id, [cursor])
                        assert answer.status_code in (200, 204), answer.text
                finally:
                    stream.close()

    def read_eids(self) -> set[str]:
        with self._lock:
            return {read.eid for read in self.reads}

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)


def wait_caught_up(consumer: Consumer, publishers: Publishers, timeout: float = 120) -> None:
    wanted = set(publishers.acknowledged)
    wait_until(
        lambda: wanted <= consumer.read_eids(),
        timeout=timeout,
        what=f"the consumer to read the {len(wanted)} acknowledged events",
    )


def check_exactly_once_in_order(reads: Sequence[Read], publishers: Publishers) -> None:
    """Every acknowledged event read once and nothing else read twice or out of nowhere; in
    each partition, each publisher's events in the order it published them."""
    counts = Counter(read.eid for read in reads)
    assert not [eid for eid, n in counts.items() if n > 1], "events read twice"
    assert set(publishers.acknowledged) <= set(counts), "acknowledged events never read"
    assert set(counts) <= publishers.attempted, "events read that nobody published"
    last: dict[tuple[str, str], str] = {}
    for read in reads:
        publisher, sequence = read.number.split(":")
        key = (read.partition, publisher)
        assert last.get(key, "") < sequence, f"out of order in partition {read.partition}: {read}"
        last[key] = sequence
