"""Values read from Postgres kept in memory until Postgres says the tables changed.

A trigger on the tables sends ``NOTIFY <channel>`` on each write, whoever writes
(another process, another service in its own transactions), and each process drops
everything it kept as the notification arrives; every ``get`` first reads what is
already on the listening connection. A write this process made drops them at once
(``invalidate``), so its own clients always read their writes; another process answers
past a write only for the moment the notification takes to arrive.

While the listening connection is down nothing is kept: every read goes to Postgres,
as without a cache, until it listens again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from typing import Any

import psycopg
from psycopg import sql

from changebroker import logs

log = logging.getLogger(__name__)

MAX_BYTES = 64 * 1024 * 1024  # past this, everything is dropped and kept anew
RECONNECT_SECONDS = (0.5, 1.0, 2.0, 5.0)


class NotifiedCache:
    def __init__(self, dsn: str, channel: str) -> None:
        self.dsn = dsn
        self.channel = channel
        self.generation = 0  # moves on every drop: a read begun before it is not kept
        self._entries: dict[Hashable, Any] = {}
        self._bytes = 0
        self._conn: psycopg.Connection[Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._fd = -1

    @property
    def listening(self) -> bool:
        return self._conn is not None

    def get(self, key: Hashable) -> Any:
        """The kept value, or None. Reads what already arrived on the listening connection
        first, so a notification that is in is never answered past."""
        if self._conn is None:
            return None
        self._receive()
        return self._entries.get(key)

    def put(self, key: Hashable, value: Any, size: int, generation: int) -> None:
        """Keep ``value`` unless anything changed since ``generation`` (read before the
        value was): a value read before a change must not outlive it."""
        if self._conn is None or generation != self.generation:
            return
        if self._bytes + size > MAX_BYTES:
            self._drop()
        self._entries[key] = value
        self._bytes += size

    def invalidate(self) -> None:
        """Drop everything: this process has just written."""
        self._drop()

    def _drop(self) -> None:
        self.generation += 1
        self._entries.clear()
        self._bytes = 0

    # -- listening ----------------------------------------------------------------------

    async def start(self) -> None:
        """Listen (kept values are served from then on); reconnects on its own if cut."""
        await self._listen()
        if self._conn is None:
            self._task = asyncio.create_task(self._reconnect())

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
        self._stop_listening()

    async def _listen(self) -> None:
        try:
            conn = await asyncio.to_thread(_listening_connection, self.dsn, self.channel)
        except psycopg.Error as error:
            log.warning(
                "cannot listen for changes; reading Postgres meanwhile",
                extra=logs.fields(channel=self.channel, error=str(error)),
            )
            return
        conn.pgconn.nonblocking = 1
        self._fd = conn.fileno()
        asyncio.get_running_loop().add_reader(self._fd, self._receive)
        self._drop()  # whatever changed while nobody listened
        self._conn = conn

    def _receive(self) -> None:
        conn = self._conn
        if conn is None:
            return
        try:
            conn.pgconn.consume_input()
        except psycopg.OperationalError as error:
            log.warning(
                "lost the change notifications; reconnecting",
                extra=logs.fields(channel=self.channel, error=str(error)),
            )
            self._stop_listening()
            if not self._closed:
                self._task = asyncio.get_running_loop().create_task(self._reconnect())
            return
        changed = False
        while conn.pgconn.notifies() is not None:
            changed = True
        if changed:
            self._drop()

    def _stop_listening(self) -> None:
        conn, self._conn = self._conn, None
        self._drop()
        if conn is None:
            return
        asyncio.get_running_loop().remove_reader(self._fd)
        conn.close()

    async def _reconnect(self) -> None:
        attempt = 0
        while not self._closed and self._conn is None:
            await asyncio.sleep(RECONNECT_SECONDS[min(attempt, len(RECONNECT_SECONDS) - 1)])
            attempt += 1
            await self._listen()


def _listening_connection(dsn: str, channel: str) -> psycopg.Connection[Any]:
    conn: psycopg.Connection[Any] = psycopg.connect(
        dsn, autocommit=True, application_name=f"changebroker-listen-{channel}"
    )
    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
    return conn
