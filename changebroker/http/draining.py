"""Stopping gracefully: ``draining`` tells endless responses to end, a worker's signals
set it too, and a connection drains once no process listens at its address any more."""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from changebroker.http.garbage import freeze_startup_objects

# How long a draining worker waits for the others to stop listening before it drains anyway.
DRAIN_UNLISTEN_BOUND = 2.0

# Set once the process is asked to stop (SIGTERM, SIGINT): endless responses (event streams)
# end after the batch they are on, so they end whole within the graceful shutdown's time.
draining = threading.Event()

# Per server: its connections drain once this is done.
NOBODY_LISTENS: weakref.WeakKeyDictionary[ServerState, asyncio.Task[None]] = (
    weakref.WeakKeyDictionary()
)


async def until_nobody_listens(
    loop: asyncio.AbstractEventLoop, family: int, address: tuple[Any, ...]
) -> None:
    """Until a connection to ``address`` is refused, at most ``DRAIN_UNLISTEN_BOUND``.

    The workers of a service share one listening socket, which refuses connections only once
    every worker has closed its copy. A worker that drained at once would send its clients to
    reconnect (``connection: close``) into the backlog of a worker about to close, and what
    that backlog holds when it closes is reset: a request sent, never answered."""
    deadline = loop.time() + DRAIN_UNLISTEN_BOUND
    while loop.time() < deadline:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setblocking(False)
            try:
                await loop.sock_connect(probe, address)
            except OSError:
                return
        await asyncio.sleep(0.01)


class DrainingServer(uvicorn.Server):
    """uvicorn's server of one process, setting ``draining`` as it is asked to stop."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        draining.set()
        super().handle_exit(sig, frame)


def drain_in_worker() -> None:
    """In a worker process of uvicorn's (``--workers`` above 1), called while its app is made:
    SIGTERM and SIGINT set ``draining`` too, as in ``serve``, so a worker's streams also end
    after their current batch instead of being cut at the graceful timeout. The worker's
    server has installed its exit handlers by then (before it loads the app); they are kept
    and called after. What start-up made is left out of garbage collection, as ``serve``
    does."""
    freeze_startup_objects()
    for signum in (signal.SIGTERM, signal.SIGINT):
        then = signal.getsignal(signum)
        if not callable(then):
            raise RuntimeError(
                f"no exit handler for {signum.name} while the app is made: call this from"
                " the app factory of a uvicorn worker"
            )

        def drain_then_exit(
            sig: int, frame: FrameType | None, then: Callable[[int, FrameType | None], Any] = then
        ) -> None:
            draining.set()
            then(sig, frame)

        signal.signal(signum, drain_then_exit)
