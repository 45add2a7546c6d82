"""What one broker process shares with the others about subscription streams, through Postgres.

* Notifications: one ``LISTEN broker_subscriptions`` connection per process; a
  payload is a subscription id, and every local waiter of that subscription
  wakes (a stream re-reads its partitions, a reset sees streams finish). Every
  change to sessions, assignments or offsets sends one, in its transaction.
* Liveness: the process extends ``alive_until`` of the sessions it serves every
  ``HEARTBEAT_SECONDS``; a session of a process that died stops counting after
  ``ALIVE_SECONDS``, and the next sweep (``on_tick``, in any live process) closes
  it and gives its partitions to the streams that remain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator

import psycopg
from psycopg_pool import AsyncConnectionPool

from changebroker import logs

log = logging.getLogger(__name__)

CHANNEL = "broker_subscriptions"
HEARTBEAT_SECONDS = 5.0
ALIVE_SECONDS = 20.0
RECONNECT_SECONDS = 1.0


def notify_sql(subscription_id: str) -> tuple[str, tuple[str, str]]:
    """The statement that wakes every stream of the subscription, in every broker process."""
    return "SELECT pg_notify(%s, %s)", (CHANNEL, subscription_id)


class Coordinator:
    def __init__(
        self, dsn: str, pool: AsyncConnectionPool, on_tick: Callable[[], Awaitable[None]]
    ) -> None:
        self._dsn = dsn
        self._pool = pool
        self._on_tick = on_tick
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        self.local_sessions: set[str] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._listening = asyncio.Event()

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._listen(), name="subscription-notifications"),
            asyncio.create_task(self._heartbeat(), name="subscription-heartbeat"),
        ]
        # A stream opened before LISTEN runs would miss its first notifications.
        await self._listening.wait()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @contextlib.contextmanager
    def waiter(self, subscription_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever the subscription changes, for as long as the block runs."""
        event = asyncio.Event()
        self._waiters[subscription_id].add(event)
        try:
            yield event
        finally:
            waiting = self._waiters[subscription_id]
            waiting.discard(event)
            if not waiting:
                del self._waiters[subscription_id]

    def _wake(self, subscription_id: str) -> None:
        for event in self._waiters.get(subscription_id, ()):
            event.set()

    async def _listen(self) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._dsn, autocommit=True, application_name="changebroker-broker-listen"
                ) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self._listening.set()
                    # Changes made while reconnecting were not heard: everyone looks again.
                    for subscription_id in list(self._waiters):
                        self._wake(subscription_id)
                    async for notification in conn.notifies():
                        self._wake(notification.payload)
            except psycopg.OperationalError as error:
                log.warning(
                    "subscription notifications lost; reconnecting",
                    extra=logs.fields(error=str(error)),
                )
                await asyncio.sleep(RECONNECT_SECONDS)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            try:
                if self.local_sessions:
                    async with self._pool.connection() as conn:
                        await conn.execute(
                            "UPDATE broker_subscription_sessions"
                            " SET alive_until = now() + make_interval(secs => %s)"
                            # Closed by a reset but still ending: the reset waits for it.
                            " WHERE stream_id = ANY(%s::uuid[]) AND NOT finished",
                            (ALIVE_SECONDS, list(self.local_sessions)),
                        )
                await self._on_tick()
            except psycopg.OperationalError as error:
                log.warning("session heartbeat failed", extra=logs.fields(error=str(error)))
