"""The bridge's batches, committed in order, one Kafka transaction at a time.

A transaction takes several round trips to Kafka (the events' acknowledgements, the
position record, the commit itself: about 8 ms on the development machine). A batch
handed over while one is under way waits, with every batch handed over after it, and they
all go in the next transaction the moment the one under way ends. Committing each batch
on its own after the one before it made a change wait for two transactions or more.

Transactions also start at most one per ``interval``, as Kafka Streams' exactly-once
``commit.interval.ms`` paces its own. Each costs Kafka far more than its records: the
coordinator's log entries and a commit marker in every partition it wrote. Under many small
database transactions (pgbench's), Kafka transactions back to back, a few events each, cost
Kafka twice the CPU they cost at 100 ms apart; the price is latency, so it is the
operator's choice (``--commit-interval-ms``, none by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from changebroker.bridge.transactions import Transactions
from changebroker.broker.publishing.producer import Message

Tag = TypeVar("Tag")


class Commits(Generic[Tag]):
    def __init__(
        self,
        producer: Transactions,
        committed: Callable[[Tag], None],
        max_waiting: int,
        interval: float = 0.0,
    ) -> None:
        """``committed(tag)`` runs once a transaction has committed, with the ``tag`` of the
        position record it committed (the last handed over to it). Past ``max_waiting``
        waiting messages, handing over more waits for the transaction under way. The next
        transaction starts ``interval`` seconds after the one before started, or later."""
        self._producer = producer
        self._committed = committed
        self._max_waiting = max_waiting
        self._interval = interval
        self._running: asyncio.Future[None] | None = None
        self._waiting: tuple[list[Message], dict[str, Any], Tag] | None = None

    async def add(self, messages: list[Message], record: dict[str, Any], tag: Tag) -> None:
        """Commit ``messages`` with the position ``record`` after everything handed over
        before; raises the failure of a transaction that ended since."""
        if self._waiting is None:
            self._waiting = (list(messages), record, tag)
        else:
            waiting = self._waiting[0]
            waiting.extend(messages)
            self._waiting = (waiting, record, tag)
        if self._running is not None and not self._running.done():
            if len(self._waiting[0]) < self._max_waiting:
                return
            await asyncio.wait([self._running])
        await self.advance()

    def turn(self) -> asyncio.Future[None] | None:
        """What to wait for beside other work while a batch waits: the transaction under
        way; when it ends, call :meth:`advance`."""
        return self._running if self._waiting is not None else None

    def under_way(self) -> asyncio.Future[None] | None:
        """The transaction under way (its interval included), if one is."""
        return self._running if self._running is not None and not self._running.done() else None

    async def advance(self) -> None:
        """Once the transaction under way has ended (raising its failure), start the next
        with what waits."""
        if self._running is not None:
            running, self._running = self._running, None
            await running
        if self._waiting is None:
            return
        messages, record, tag = self._waiting
        self._waiting = None
        self._running = asyncio.ensure_future(self._transaction(messages, record, tag))

    async def _transaction(self, messages: list[Message], record: dict[str, Any], tag: Tag) -> None:
        """One transaction, then the rest of its ``interval``: the turn of the next."""
        started = time.monotonic()
        await asyncio.to_thread(self._producer.commit, messages, record)
        self._committed(tag)
        rest = self._interval - (time.monotonic() - started)
        if rest > 0:
            await asyncio.sleep(rest)

    async def drain(self) -> None:
        """Wait until everything handed over is committed; raises a transaction's failure."""
        while self._running is not None or self._waiting is not None:
            if self._running is not None:
                await asyncio.wait([self._running])
            await self.advance()

    async def close(self) -> None:
        """End of a session: wait for the transaction under way, whatever its outcome, and
        drop what waits (the next session starts from what Kafka holds)."""
        self._waiting = None
        if self._running is not None:
            with contextlib.suppress(Exception):  # the session failed already
                await self._running
            self._running = None
