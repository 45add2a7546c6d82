"""The blocking flavour: :class:`ChangeFeed`, :class:`Subscription`, and the handoff from a
replay snapshot, with ``httpx.Client``."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
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

    def __init__(self, client: httpx.Client, stop: threading.Event) -> None:
        self.client = client
        self.stop = stop
        self._open: httpx.Response | None = None
        self._pieces: Iterator[bytes] = iter(())

    def perform(self, effect: Effect) -> Any:
        try:
            if isinstance(effect, Open):
                self.close()
                response = self.client.send(request(self.client, effect), stream=True)
                if response.status_code != 200:
                    try:
                        return Answer(response.status_code, response.headers, response.read())
                    finally:
                        response.close()
                self._open, self._pieces = response, response.iter_bytes()
                return Answer(200, response.headers, b"")
            if isinstance(effect, Call):
                response = self.client.send(request(self.client, effect))
                return Answer(response.status_code, response.headers, response.content)
            if isinstance(effect, Read):
                return next((piece for piece in self._pieces if piece), b"")
        except httpx.RequestError as error:
            return Failure(error)
        if isinstance(effect, Close):
            self.close()
        elif isinstance(effect, Sleep):
            self.stop.wait(effect.seconds)  # stop() cuts it short
        elif isinstance(effect, Blocking):
            return effect.function()
        return None

    def close(self) -> None:
        if self._open is not None:
            self._open.close()
            self._open, self._pieces = None, iter(())


def _drive(client: httpx.Client, program: Program, stop: threading.Event) -> Iterator[Any]:
    """What ``program`` emits, the effects in between carried out."""
    io = _IO(client, stop)
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
                result = io.perform(effect)
    finally:
        io.close()
        program.close()


def _complete(client: httpx.Client, program: Program, stop: threading.Event | None = None) -> Any:
    """Run a program that hands out nothing to its end; its return value."""
    result: list[Any] = []
    for item in _drive(client, returning(program, result), stop or threading.Event()):
        raise AssertionError(f"{item!r} handed out by a program handing out none")
    return result[0]


class ChangeFeed(changes.FeedBase):
    """Changes of ``selectors`` from ``/changes`` (and a snapshot when needed), one item at a
    time::

        with ChangeFeed("http://127.0.0.1:9000", ["tenant_a"],
                        store=FilePositionStore("feed.json"), start="snapshot") as feed:
            for item in feed:
                ...  # SnapshotStart, SnapshotRow, SnapshotEnd, Change

    See :class:`~changebroker.client.changes.FeedBase` for the options and docs/client.md.
    """

    _items: Iterator[Item] | None = None

    @functools.cached_property
    def _client(self) -> httpx.Client:
        return httpx.Client(**self._client_options)

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close(handled=kind is None)

    def open(self) -> None:
        """Load the stored position (or resolve ``start``); iterating does it when needed."""
        if not self._begun:
            _complete(self._client, changes.begin(self._run), self._stop_event)
            self._begun = True

    def __iter__(self) -> Iterator[Item]:
        self.open()
        if self._items is not None:
            self._items.close()  # type: ignore[attr-defined]
        self._items = _drive(self._client, changes.follow(self._run), self._stop_event)
        return self._items

    def stop(self) -> None:
        """End the iteration (from another thread too): within ``block`` seconds."""
        super().stop()
        self._stop_event.set()

    def close(self, handled: bool = True) -> None:
        """Stop; with ``handled``, the last item handed out counts as done with (its position
        is stored when it ends an answer or a snapshot)."""
        if self._items is not None:
            self._items.close()  # type: ignore[attr-defined]
            self._items = None
        if handled:
            self._run.store_pending()
        self._client.close()

    @functools.cached_property
    def _stop_event(self) -> threading.Event:
        return threading.Event()


class Subscription(subscription.SubscriptionBase):
    """A consumer of a Nakadi subscription: ``run(handler)`` hands each batch of events to
    ``handler`` and commits its cursor once the handler returns, reconnecting as needed,
    until :meth:`stop`. See :class:`~changebroker.client.subscription.SubscriptionBase` for
    the options and docs/client.md."""

    @classmethod
    def from_snapshot(
        cls,
        urls: str | Sequence[str],
        manifest: handoff.ManifestSource,
        owning_application: str,
        consumer_group: str | None = None,
        **options: Any,
    ) -> Self:
        """A consumer of a subscription that starts right after a replay snapshot (created,
        or found when the same one exists); ``options`` as for the constructor."""
        subscription_id = create_snapshot_subscription(
            urls,
            manifest,
            owning_application,
            consumer_group,
            **{k: v for k, v in options.items() if k in subscription.CONNECTION_OPTIONS},
        )
        return cls(urls, subscription_id, **options)

    @functools.cached_property
    def _client(self) -> httpx.Client:
        return httpx.Client(**self._client_options)

    @functools.cached_property
    def _stop_event(self) -> threading.Event:
        return threading.Event()

    def run(self, handler: Callable[[EventBatch], object]) -> None:
        """Until :meth:`stop` (noticed within ``batch_flush_timeout``, a keep-alive's
        interval) or an error; a handler's exception ends it with the batch uncommitted."""
        for batch in _drive(self._client, subscription.consume(self._run), self._stop_event):
            handler(batch)

    def stop(self) -> None:
        super().stop()
        self._stop_event.set()

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def create_snapshot_subscription(
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
    """The id of a subscription starting right after the replay snapshot ``manifest`` (its
    directory, its manifest.json, or the manifest as read): created, or the existing one of
    the same owner, event types and consumer group (default ``snapshot-<id>``) when it starts
    there too; :class:`~changebroker.client.errors.SubscriptionRefused` otherwise."""
    program = handoff.create(urls, manifest, owning_application, consumer_group, backoff)
    with httpx.Client(**client_options(token, verify, headers, timeout)) as client:
        created: str = _complete(client, program)
    return created
