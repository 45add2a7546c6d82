"""Work that runs in the background for as long as a block lasts (an app's lifespan)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any


@contextlib.asynccontextmanager
async def running(work: Coroutine[Any, Any, Any]) -> AsyncIterator[None]:
    """``work`` as a task, cancelled (and awaited) when the block ends."""
    task = asyncio.create_task(work)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
