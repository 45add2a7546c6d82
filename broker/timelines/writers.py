"""Every process that writes events, and the pause a timeline switch asks of all of them.

Each broker process and each bridge registers in ``broker_writers`` and renews its
registration every ``HEARTBEAT_SECONDS`` (for ``ALIVE_SECONDS``). A timeline switch locks its
event type (a row in ``broker_write_locks``, whose trigger notifies every writer); each writer
stops starting writes to that event type, lets those under way be answered by Kafka, and
records that it has paused (``broker_write_pauses``). Once every registered writer has, no
event can reach the old topic any more: the switch reads where it ends, commits the next
timeline and removes the lock. Writers then read the event type again (``on_resume``) and
write to the new topic. So the switch is atomic across processes: each event is in one
timeline, before the recorded end or after it.

A writer that could not renew its registration (Postgres out of reach) starts no write until
it could; it counts as gone ``LAPSE_GRACE_SECONDS`` after its registration ended, the longest a
write it had started may still take to reach Kafka (the producer's 30 s message timeout). A
lock past its ``expires_at`` was left by a switch that died (a switch commits well before,
holding the lock's row): it no longer counts, and any process removes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable

import psycopg
from psycopg_pool import AsyncConnectionPool

from changebroker import logs, tasks
from changebroker.broker.errors import Unavailable

log = logging.getLogger(__name__)

CHANNEL = "broker_write_locks_changed"
HEARTBEAT_SECONDS = 5.0
ALIVE_SECONDS = 20.0
LAPSE_GRACE_SECONDS = 35.0
# Writes stop this long before the registration others see ends: clocks differ a little.
_MARGIN_SECONDS = 1.0
_RECONNECT_SECONDS = 1.0
MAINTENANCE = "Event type is currently in maintenance, please repeat request"


def lock_seconds(wait_timeout: float) -> float:
    """How long a switch's lock counts: the switch gives up waiting for writers after
    ``wait_timeout`` and commits within seconds of it (else it gives up)."""
    return wait_timeout + 30.0


class Writer:
    """This process as a writer of events.

    Broker processes call :meth:`enter` and :meth:`leave` around each write of an event type,
    and pause on their own; a bridge (``auto_pause=False``), whose writes are batched into
    transactions, waits for :attr:`pending` and, once everything it prepared is committed,
    stays in :meth:`paused` while event types are locked.
    """

    def __init__(
        self,
        dsn: str,
        pool: AsyncConnectionPool,
        kind: str,
        *,
        wait_timeout: float,
        on_resume: Callable[[], None],
        auto_pause: bool = True,
    ) -> None:
        self.id = str(uuid.uuid4())
        self._dsn = dsn
        self._pool = pool
        self._kind = kind
        self._wait_timeout = wait_timeout
        self._on_resume = on_resume
        self._auto_pause = auto_pause
        self._locks: dict[str, str] = {}  # event type -> lock id, as last read
        self._paused: set[str] = set()  # lock ids this writer recorded its pause for
        self._in_flight: Counter[str] = Counter()
        self._changed = asyncio.Event()  # set (and replaced) whenever the locks change
        self.pending = asyncio.Event()  # a lock this writer has not paused for
        self._pause_now = asyncio.Event()
        self._alive_until = 0.0  # monotonic: writes start only before this
        self._listening = asyncio.Event()
        self._background = contextlib.AsyncExitStack()

    async def start(self) -> None:
        await self._register()
        await self._background.enter_async_context(tasks.running(self._listen()))
        await self._background.enter_async_context(tasks.running(self._heartbeat()))
        if self._auto_pause:
            await self._background.enter_async_context(tasks.running(self._pauser()))
        # A write started before the locks were read could miss a switch under way.
        await self._listening.wait()

    async def stop(self) -> None:
        await self._background.aclose()
        with contextlib.suppress(psycopg.Error):
            async with self._pool.connection() as conn:
                await conn.execute("DELETE FROM broker_writers WHERE id = %s", (self.id,))

    def alive(self) -> bool:
        return time.monotonic() < self._alive_until

    # -- writing ------------------------------------------------------------------------

    async def enter(self, event_type: str) -> bool:
        """Before a write to ``event_type``: waits while a switch has it locked (503 after the
        wait timeout); True when it waited (the event type is then to be read again)."""
        if not self.alive():
            raise Unavailable(
                "this broker process cannot reach Postgres to take part in timeline switches;"
                " retry in a moment"
            )
        waited = False
        if event_type in self._locks:
            waited = True
            deadline = time.monotonic() + self._wait_timeout
            while event_type in self._locks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise Unavailable(MAINTENANCE)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), remaining)
        self._in_flight[event_type] += 1
        return waited

    def leave(self, event_type: str) -> None:
        """After the write :meth:`enter` let start was answered by Kafka."""
        self._in_flight[event_type] -= 1
        if self._in_flight[event_type] <= 0:
            del self._in_flight[event_type]
            if event_type in self._locks:
                self._pause_now.set()

    # -- pausing ------------------------------------------------------------------------

    async def paused(self) -> None:
        """For a writer that has nothing under way: records its pause for every lock, those
        that come meanwhile too, until no event type is locked."""
        while self._locks:
            changed = self._changed
            await self._record({lock for lock in self._locks.values() if lock not in self._paused})
            await changed.wait()

    async def _pauser(self) -> None:
        while True:
            await self._pause_now.wait()
            self._pause_now.clear()
            idle = {
                lock
                for event_type, lock in self._locks.items()
                if lock not in self._paused and not self._in_flight.get(event_type)
            }
            try:
                await self._record(idle)
            except psycopg.Error as error:
                log.warning("could not record a write pause", extra=logs.fields(error=str(error)))
                await asyncio.sleep(_RECONNECT_SECONDS)
                self._pause_now.set()

    async def _record(self, locks: set[str]) -> None:
        if not locks:
            return
        async with self._pool.connection() as conn:
            await conn.execute(
                "INSERT INTO broker_write_pauses (lock_id, writer_id)"
                " SELECT l.id, %s FROM broker_write_locks l WHERE l.id = ANY(%s::uuid[])"
                " ON CONFLICT DO NOTHING",
                (self.id, sorted(locks)),
            )
        self._paused |= locks
        if all(lock in self._paused for lock in self._locks.values()):
            self.pending.clear()

    # -- Postgres -----------------------------------------------------------------------

    async def _register(self) -> None:
        asked_at = time.monotonic()
        async with self._pool.connection() as conn:
            await conn.execute(
                "INSERT INTO broker_writers (id, kind, alive_until)"
                " VALUES (%s, %s, now() + make_interval(secs => %s))"
                " ON CONFLICT (id) DO UPDATE SET alive_until = excluded.alive_until",
                (self.id, self._kind, ALIVE_SECONDS),
            )
        lapsed = not self.alive()
        self._alive_until = asked_at + ALIVE_SECONDS - _MARGIN_SECONDS
        if lapsed:
            # Switches may have gone by without this writer: read every event type again.
            self._on_resume()

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            try:
                await self._register()
                async with self._pool.connection() as conn:
                    await conn.execute("DELETE FROM broker_write_locks WHERE expires_at < now()")
                    await conn.execute(
                        "DELETE FROM broker_writers"
                        " WHERE alive_until < now() - make_interval(secs => 3600)"
                    )
            except psycopg.Error as error:
                log.warning("writer heartbeat failed", extra=logs.fields(error=str(error)))

    async def _listen(self) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._dsn, autocommit=True, application_name="changebroker-write-locks"
                ) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    # Read on the pool: the listening connection is busy with notifies().
                    await self._read_locks()
                    self._listening.set()
                    async for _ in conn.notifies():
                        await self._read_locks()
            except psycopg.OperationalError as error:
                log.warning(
                    "write lock notifications lost; reconnecting",
                    extra=logs.fields(error=str(error)),
                )
                await asyncio.sleep(_RECONNECT_SECONDS)

    async def _read_locks(self) -> None:
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "SELECT event_type, id::text FROM broker_write_locks WHERE expires_at >= now()"
            )
            found = await cur.fetchall()
        locks = {str(event_type): str(lock) for event_type, lock in found}
        released = set(self._locks) - set(locks)
        self._locks = locks
        self._paused &= set(locks.values())
        if released:
            # Before any waiting write goes on: it must see the switch's new topic.
            self._on_resume()
        if any(lock not in self._paused for lock in locks.values()):
            self.pending.set()
            self._pause_now.set()
        else:
            self.pending.clear()
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
