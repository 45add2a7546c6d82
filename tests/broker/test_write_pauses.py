"""The pause a timeline switch asks of every process that writes events
(broker/timelines/writers.py): the switch waits for writes under way, writes asked for
meanwhile wait for it, and a writer that does not pause fails the switch, changing nothing."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import httpx
import psycopg
import pytest

from changebroker.broker.event_types.store import Store
from changebroker.broker.settings import Settings
from changebroker.broker.timelines.writers import Writer
from changebroker.stack.processes import wait_until
from tests.broker.test_admin_settings import problem
from tests.broker.test_timelines import existing_topics, orders, read_offsets
from tests.support.brokers import broker_client
from tests.support.event_types import business_event_type

T = TypeVar("T")


class OtherWriters:
    """Writers of events as other processes would be: each in an event loop of its own
    thread, on the module's database (``broker_url`` migrated it)."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._started: list[tuple[Store, Writer]] = []

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def start(self, *, auto_pause: bool = True) -> Writer:
        async def start() -> Writer:
            store = Store(self._dsn, pool_size=2)
            await store.open()
            writer = Writer(
                self._dsn,
                store.pool,
                "test",
                wait_timeout=30,
                on_resume=store.forget_revisions,
                auto_pause=auto_pause,
            )
            await writer.start()
            self._started.append((store, writer))
            return writer

        return self._run(start()).result(60)

    def enter(self, writer: Writer, event_type: str) -> concurrent.futures.Future[bool]:
        return self._run(writer.enter(event_type))

    def paused(self, writer: Writer) -> concurrent.futures.Future[None]:
        return self._run(writer.paused())

    def leave(self, writer: Writer, event_type: str) -> None:
        self._loop.call_soon_threadsafe(writer.leave, event_type)

    def close(self) -> None:
        async def stop() -> None:
            for store, writer in self._started:
                await writer.stop()
                await store.close()

        self._run(stop()).result(60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)


@pytest.fixture
def others(broker_dsn: str, broker_url: str) -> Iterator[OtherWriters]:
    writers = OtherWriters(broker_dsn)
    yield writers
    writers.close()


def test_a_switch_waits_for_writes_under_way_and_new_ones_wait_for_it(
    client: httpx.Client, others: OtherWriters, unique_name
) -> None:
    name = unique_name("paused")
    assert client.post("/event-types", json=business_event_type(name)).status_code == 201
    writer = others.start()
    assert others.enter(writer, name).result(30) is False  # nothing locked: it goes on at once
    switching = concurrent.futures.ThreadPoolExecutor(1).submit(
        client.post, f"/event-types/{name}/timelines", json={"storage_id": "default"}
    )
    # The switch locked the event type and waits for the write under way.
    wait_until(writer.pending.is_set, timeout=30, what="the writer to hear of the switch")
    later = others.enter(writer, name)
    with pytest.raises(concurrent.futures.TimeoutError):
        switching.result(timeout=2)
    assert not later.done()
    assert len(client.get(f"/event-types/{name}/timelines").json()) == 1
    others.leave(writer, name)  # Kafka answered the first write
    assert switching.result(timeout=30).status_code == 201
    # The write that waited goes on after the switch, and knows to read the event type again.
    assert later.result(timeout=30) is True
    others.leave(writer, name)
    assert len(client.get(f"/event-types/{name}/timelines").json()) == 2


def test_a_writer_that_does_not_pause_fails_the_switch_which_changes_nothing(
    broker_dsn: str, kafka_bootstrap: str, others: OtherWriters, unique_name
) -> None:
    settings = Settings(pg_dsn=broker_dsn, kafka_bootstrap=kafka_bootstrap, timeline_wait_timeout=2)
    others.start(auto_pause=False)  # a bridge that never gets round to it
    with broker_client(settings) as impatient:
        name = unique_name("stuck")
        assert impatient.post("/event-types", json=business_event_type(name)).status_code == 201
        orders(impatient, name, 2)
        topics = {t for t in existing_topics(kafka_bootstrap) if t.startswith(f"nakadi.{name}.")}
        refused = impatient.post(f"/event-types/{name}/timelines", json={"storage_id": "default"})
        assert "did not pause within 2 s" in str(problem(refused, 503)["detail"])
        assert len(impatient.get(f"/event-types/{name}/timelines").json()) == 1
        after = {t for t in existing_topics(kafka_bootstrap) if t.startswith(f"nakadi.{name}.")}
        assert after == topics  # the new topic was deleted again
        with psycopg.connect(broker_dsn) as conn:
            assert conn.execute("SELECT count(*) FROM broker_write_locks").fetchone() == (0,)
        # Publishing and reading go on as before.
        orders(impatient, name, 1)
        assert len(read_offsets(impatient, name, "BEGIN", 3)) == 3


def test_a_writer_that_pauses_by_itself_lets_switches_that_overlap_through(
    client: httpx.Client, others: OtherWriters, unique_name
) -> None:
    """The bridge's way: once what it prepared is committed, it stays paused while any event
    type is locked, pausing for locks that come meanwhile too."""
    names = [unique_name("first"), unique_name("second")]
    for name in names:
        assert client.post("/event-types", json=business_event_type(name)).status_code == 201
    bridge = others.start(auto_pause=False)
    busy = others.start()  # keeps the first switch waiting: a write to it under way
    assert others.enter(busy, names[0]).result(30) is False
    switches = concurrent.futures.ThreadPoolExecutor(2)
    first = switches.submit(
        client.post, f"/event-types/{names[0]}/timelines", json={"storage_id": "default"}
    )
    wait_until(bridge.pending.is_set, timeout=30, what="the first switch's lock")
    paused = others.paused(bridge)
    wait_until(lambda: not bridge.pending.is_set(), timeout=30, what="the first pause")
    # The second lock comes while the writer stays paused for the first.
    second = switches.submit(
        client.post, f"/event-types/{names[1]}/timelines", json={"storage_id": "default"}
    )
    assert second.result(timeout=30).status_code == 201
    assert not paused.done() and not first.done()
    others.leave(busy, names[0])
    assert first.result(timeout=30).status_code == 201
    paused.result(timeout=30)
    for name in names:
        assert len(client.get(f"/event-types/{name}/timelines").json()) == 2
