"""The asyncio flavour: :class:`AsyncChangeFeed`, :class:`AsyncSubscription`, and the handoff
from a replay snapshot, with ``httpx.AsyncClient``. The logic is the blocking flavour's
(``changes.py``, ``subscription.py``); position stores are called in a thread."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import httpx

from changebroker.client import changes, handoff, subscription
from changebroker.client.backoff import Backoff
from changebroker.client.effects import (
    Answer,
    Blocking,
    Call,
    Close,
    Effect,
    Emit,
    Failure,
    Open,
    Program,
    Read,
    Sleep,
    Verify,
    client_options,
    request,
    returning,
)
from changebroker.client.model import Item
from changebroker.client.subscription import EventBatch


class _IO:
    """Carries out a program's effects but :class:`Emit`, one open exchange at a time."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self._open: httpx.Response | None = None
        self._pieces: AsyncIterator[bytes] | None = None

    async def perform(self, effect: Effect) -> Any:
        try:
            if isinstance(effect, Open):
                await self.close()
                response = await self.client.send(request(self.client, effect), stream=True)
                if response.status_code != 200:
                    try:
                        return Answer(
                            response.status_code, response.headers, await response.aread()
                        )
                    finally:
                        await response.aclose()
                self._open, self._pieces = response, response.aiter_bytes()
                return Answer(200, response.headers, b"")
            if isinstance(effect, Call):
                response = await self.client.send(request(self.client, effect))
                return Answer(response.status_code, response.headers, response.content)
            if isinstance(effect, Read):
                if self._pieces is not None:
                    async for piece in self._pieces:
                        if piece:
                            return piece
                return b""
        except httpx.RequestError as error:
            return Failure(error)
        if isinstance(effect, Close):
            await self.close()
        elif isinstance(effect, Sleep):
            await asyncio.sleep(effect.seconds)
        elif isinstance(effect, Blocking):
            return await asyncio.to_thread(effect.function)
        return None

    async def close(self) -> None:
        if self._open is not None:
            await self._open.aclose()
            self._open, self._pieces = None, None


async def _drive(client: httpx.AsyncClient, program: Program) -> AsyncGenerator[Any, None]:
    """What ``program`` emits, the effects in between carried out."""
    io = _IO(client)
    result: Any = None
    try:
        while True:
            try:
                effect = program.send(result)
            except StopIteration:
                return
            if isinstance(effect, Emit):
                yield effect.item
                result = None
            else:
                result = await io.perform(effect)
    finally:
        await io.close()
        program.close()


async def _complete(client: httpx.AsyncClient, program: Program) -> Any:
    """Run a program that hands out nothing to its end; its return value."""
    result: list[Any] = []
    async for item in _drive(client, returning(program, result)):
        raise AssertionError(f"{item!r} handed out by a program handing out none")
    return result[0]


class AsyncChangeFeed(changes.FeedBase):
    """The change feed under asyncio::

        async with AsyncChangeFeed("http://127.0.0.1:9000", ["tenant_a"],
                                   store=FilePositionStore("feed.json")) as feed:
            async for item in feed:
                ...

    Options as :class:`~changebroker.client.changes.FeedBase`; docs/client.md.
    """

    _items: AsyncGenerator[Any, None] | None = None

    @functools.cached_property
    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(**self._client_options)

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close(handled=kind is None)

    async def open(self) -> None:
        """Load the stored position (or resolve ``start``); iterating does it when needed."""
        if not self._begun:
            await _complete(self._client, changes.begin(self._run))
            self._begun = True

    async def _iterate(self) -> AsyncIterator[Item]:
        await self.open()
        if self._items is not None:
            await self._items.aclose()
        self._items = _drive(self._client, changes.follow(self._run))
        async for item in self._items:
            yield item

    def __aiter__(self) -> AsyncIterator[Item]:
        return self._iterate()

    async def close(self, handled: bool = True) -> None:
        """As :meth:`ChangeFeed.close <changebroker.client.sync.ChangeFeed.close>`."""
        if self._items is not None:
            await self._items.aclose()
            self._items = None
        if handled:
            await asyncio.to_thread(self._run.store_pending)
        await self._client.aclose()


class AsyncSubscription(subscription.SubscriptionBase):
    """The subscription consumer under asyncio: ``await run(handler)`` with a coroutine
    function as the handler. Options as
    :class:`~changebroker.client.subscription.SubscriptionBase`; docs/client.md."""

    @classmethod
    async def from_snapshot(
        cls,
        urls: str | Sequence[str],
        manifest: handoff.ManifestSource,
        owning_application: str,
        consumer_group: str | None = None,
        **options: Any,
    ) -> Self:
        """As :meth:`Subscription.from_snapshot
        <changebroker.client.sync.Subscription.from_snapshot>`."""
        subscription_id = await create_snapshot_subscription(
            urls,
            manifest,
            owning_application,
            consumer_group,
            **{k: v for k, v in options.items() if k in subscription.CONNECTION_OPTIONS},
        )
        return cls(urls, subscription_id, **options)

    @functools.cached_property
    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(**self._client_options)

    async def run(self, handler: Callable[[EventBatch], Awaitable[object]]) -> None:
        """Until :meth:`stop` or an error (cancelling the task ends it too); a handler's
        exception ends it with the batch uncommitted."""
        batches = _drive(self._client, subscription.consume(self._run))
        try:
            async for batch in batches:
                await handler(batch)
        finally:
            await batches.aclose()

    async def close(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def create_snapshot_subscription(
    urls: str | Sequence[str],
    manifest: handoff.ManifestSource,
    owning_application: str,
    consumer_group: str | None = None,
    *,
    token: str | None = None,
    verify: Verify = True,
    headers: Mapping[str, str] | None = None,
    timeout: float = 10.0,
    backoff: Backoff | None = None,
) -> str:
    """As :func:`changebroker.client.sync.create_snapshot_subscription`."""
    program = handoff.create(urls, manifest, owning_application, consumer_group, backoff)
    async with httpx.AsyncClient(**client_options(token, verify, headers, timeout)) as client:
        created: str = await _complete(client, program)
    return created
