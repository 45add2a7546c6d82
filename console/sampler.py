"""Samples lag in the background: the changeserver's newest sequence, the bridge's lag and
events, and every subscription's unconsumed events (its stats), into the console's history.

Pages then read the newest samples rather than asking for 1,000 subscriptions' stats on
each view; the subscription page itself asks for its live stats.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import AbstractAsyncContextManager
from typing import Any

from changebroker import tasks
from changebroker.client import sequence_order
from changebroker.console.context import Console

log = logging.getLogger(__name__)

STATS_CONCURRENCY = 8
LIST_PAGE = 1000


def total_unconsumed(stats: Any) -> int:
    """The sum of ``unconsumed_events`` over a subscription's stats items."""
    items = stats.get("items", []) if isinstance(stats, dict) else []
    return sum(
        int(partition.get("unconsumed_events") or 0)
        for item in items
        for partition in item.get("partitions", [])
    )


def lsn(sequence: Any) -> int | None:
    try:
        return sequence_order(str(sequence))[0]
    except ValueError:
        return None


class Sampler:
    def __init__(self, console: Console, interval: float) -> None:
        self.console = console
        self.interval = interval

    async def run(self) -> None:
        while True:
            try:
                await self.sample()
            except Exception:
                # A bug here must not stop the pages; the next round tries again.
                log.exception("sampling failed")
            await asyncio.sleep(self.interval)

    async def sample(self) -> None:
        await asyncio.gather(self._pipeline(), self._subscriptions())
        self.console.sampled_at = time.time()

    async def _pipeline(self) -> None:
        upstream, history = self.console.upstream, self.console.history
        changes, status = await asyncio.gather(
            upstream.changeserver("/changes", params={"limit": "0"}),
            upstream.bridge("GET", "/status"),
        )
        if changes.ok and isinstance(changes.body, dict):
            last = lsn(changes.body.get("lastSequence"))
            if last is not None:
                history.add("changeserver:last_lsn", last)
        if status.ok and isinstance(status.body, dict):
            history.add("bridge:lag_bytes", float(status.body.get("lag_bytes") or 0))
            units = status.body.get("units") or {}
            events = sum(int(unit.get("events") or 0) for unit in units.values())
            history.add("bridge:events", events)

    async def _subscriptions(self) -> None:
        upstream = self.console.upstream
        ids: list[str] = []
        offset = 0
        while True:
            page = await upstream.broker(
                "GET", "/subscriptions", params={"limit": LIST_PAGE, "offset": offset}
            )
            if not page.ok or not isinstance(page.body, dict):
                return
            ids += [item["id"] for item in page.body.get("items", [])]
            if "next" not in page.body.get("_links", {}):
                break
            offset += LIST_PAGE
        limit = asyncio.Semaphore(STATS_CONCURRENCY)
        lag: dict[str, int] = {}

        async def one(subscription_id: str) -> None:
            async with limit:
                stats = await upstream.broker("GET", f"/subscriptions/{subscription_id}/stats")
            if stats.ok:
                lag[subscription_id] = total_unconsumed(stats.body)
                self.console.history.add(f"subscription:{subscription_id}", lag[subscription_id])

        await asyncio.gather(*(one(i) for i in ids))
        self.console.subscription_lag = lag
        self.console.history.add("subscriptions:unconsumed", sum(lag.values()))


def sampling(console: Console, interval: float) -> AbstractAsyncContextManager[None]:
    """The sampler running in the background for as long as the block lasts."""
    return tasks.running(Sampler(console, interval).run())
