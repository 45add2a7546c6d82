"""The subscription consumer's logic, shared by
:class:`~changebroker.client.sync.Subscription` and
:class:`~changebroker.client.aio.AsyncSubscription`: Nakadi's subscription stream
(docs/specs/nakadi-event-bus-api-0.10.1.yaml, ``/subscriptions/{id}/events``), each batch
handed to the handler and its cursor committed once the handler returns.

The stream is opened again whenever it ends: the broker ended it (``stream_timeout``,
``stream_limit``, a cursor reset), it broke off, or nothing, not even a keep-alive batch,
came for ``batch_flush_timeout`` plus a grace period (a dead connection). ``409`` (no free
partition for another stream, or a reset in progress) is waited out with backoff. Partitions
move between a subscription's streams inside open streams (rebalancing); a batch handled
and committed is never delivered again, so streams that commit what they handle process
every event once.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from changebroker.client.backoff import Backoff, Endpoints, base_urls, exchange
from changebroker.client.effects import (
    Call,
    Close,
    Effect,
    Emit,
    Failure,
    Open,
    Read,
    Sleep,
    Verify,
    client_options,
)
from changebroker.client.errors import SubscriptionError
from changebroker.client.wire import Refusal

log = logging.getLogger("changebroker.client")

STREAM_ID_HEADER = "X-Nakadi-StreamId"
NAKADI_BATCH_FLUSH_TIMEOUT = 30.0
NAKADI_COMMIT_TIMEOUT = 60.0


@dataclass(frozen=True, slots=True)
class Cursor:
    partition: str
    offset: str
    event_type: str
    cursor_token: str

    def as_json(self) -> dict[str, str]:
        return {
            "partition": self.partition,
            "offset": self.offset,
            "event_type": self.event_type,
            "cursor_token": self.cursor_token,
        }


@dataclass(frozen=True, slots=True)
class EventBatch:
    """Events of one partition, in order; committed when the handler returns."""

    cursor: Cursor
    events: list[dict[str, Any]]
    info: dict[str, Any] | None
    stream_id: str


@dataclass(frozen=True)
class SubscriptionSettings:
    urls: tuple[str, ...]
    subscription_id: str
    # Nakadi's stream parameters (batch_limit, max_uncommitted_events, ...); None: its default.
    stream: Mapping[str, float | None] = field(default_factory=dict)
    backoff: Backoff = field(default_factory=Backoff)
    timeout: float = 10.0  # connecting and sending
    read_grace: float = 15.0  # how much later than batch_flush_timeout a keep-alive may come

    def __post_init__(self) -> None:
        if not self.subscription_id:
            raise ValueError("give the subscription's id")

    def params(self) -> tuple[tuple[str, str], ...]:
        return tuple(
            (name, f"{value:g}") for name, value in self.stream.items() if value is not None
        )

    def flush_timeout(self) -> float:
        return self.stream.get("batch_flush_timeout") or NAKADI_BATCH_FLUSH_TIMEOUT

    def commit_timeout(self) -> float:
        return self.stream.get("commit_timeout") or NAKADI_COMMIT_TIMEOUT


@dataclass
class SubscriptionState:
    stopping: bool = False
    stream_id: str | None = None  # the open stream's


class SubscriptionRun:
    def __init__(self, settings: SubscriptionSettings) -> None:
        self.settings = settings
        self.state = SubscriptionState()
        self.endpoints = Endpoints(settings.urls)
        self.path = f"/subscriptions/{urllib.parse.quote(settings.subscription_id, safe='')}"

    def stopping(self) -> bool:
        return self.state.stopping


# The constructor's options that creating a subscription (``from_snapshot``) takes too.
CONNECTION_OPTIONS = frozenset({"token", "verify", "headers", "timeout", "backoff"})


class SubscriptionBase:
    """What both flavours of the subscription consumer take and share.

    ``urls``: the broker's base URL, or several (its processes, or a load balancer's).
    ``subscription_id``: the subscription to consume (``from_snapshot`` makes one that
    starts right after a replay snapshot). The stream parameters are Nakadi's, sent only when
    given: ``batch_limit``, ``stream_limit``, ``batch_flush_timeout`` (also how often a
    keep-alive batch comes; nothing for that long plus 15 s is a dead connection),
    ``stream_timeout``, ``stream_keep_alive_limit``, ``max_uncommitted_events``,
    ``commit_timeout`` (also how long a commit is retried). ``backoff``, ``timeout``,
    ``token``, ``verify``, ``headers``: as for the change feed.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        subscription_id: str,
        *,
        batch_limit: int | None = None,
        stream_limit: int | None = None,
        batch_flush_timeout: float | None = None,
        stream_timeout: float | None = None,
        stream_keep_alive_limit: int | None = None,
        max_uncommitted_events: int | None = None,
        commit_timeout: float | None = None,
        backoff: Backoff | None = None,
        timeout: float = 10.0,
        token: str | None = None,
        verify: Verify = True,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        stream = {
            "batch_limit": batch_limit,
            "stream_limit": stream_limit,
            "batch_flush_timeout": batch_flush_timeout,
            "stream_timeout": stream_timeout,
            "stream_keep_alive_limit": stream_keep_alive_limit,
            "max_uncommitted_events": max_uncommitted_events,
            "commit_timeout": commit_timeout,
        }
        self._run = SubscriptionRun(
            SubscriptionSettings(
                base_urls(urls), subscription_id, stream, backoff or Backoff(), timeout
            )
        )
        self._client_options = client_options(token, verify, headers, timeout)

    @property
    def subscription_id(self) -> str:
        return self._run.settings.subscription_id

    @property
    def stream_id(self) -> str | None:
        """The open stream's ``X-Nakadi-StreamId``."""
        return self._run.state.stream_id

    def stop(self) -> None:
        self._run.state.stopping = True


class Lines:
    """A stream's bytes in, its complete lines out."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._searched = 0  # no newline before here

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer
        buffer += data
        lines = []
        start = 0
        end = buffer.find(b"\n", self._searched)
        while end >= 0:
            lines.append(bytes(buffer[start:end]))
            start = end + 1
            end = buffer.find(b"\n", start)
        del buffer[:start]
        self._searched = len(buffer)
        return lines


def batch_of(line: bytes, stream_id: str) -> EventBatch:
    try:
        document = orjson.loads(line)
        cursor = document["cursor"]
        return EventBatch(
            Cursor(
                str(cursor["partition"]),
                str(cursor["offset"]),
                str(cursor.get("event_type", "")),
                str(cursor.get("cursor_token", "")),
            ),
            document.get("events") or [],
            document.get("info"),
            stream_id,
        )
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise SubscriptionError(
            f"stream {stream_id} sent what is not a batch ({error}): {line[:200]!r}"
        ) from None


def consume(run: SubscriptionRun) -> Generator[Effect, Any, None]:
    """Streams, one after the other, until stopping; each batch of events handed out."""
    settings, state = run.settings, run.state
    timeout = httpx.Timeout(settings.timeout, read=settings.flush_timeout() + settings.read_grace)
    # Uncompressed: a batch goes out when it is due, and the broker spends no CPU on it.
    headers = {"Accept-Encoding": "identity"}
    params = settings.params()
    delays = settings.backoff.delays()
    while not state.stopping:
        answer = yield from exchange(
            lambda base: Open("GET", base + run.path + "/events", params, headers, None, timeout),
            run.endpoints,
            settings.backoff,
            run.stopping,
        )
        if answer is None:
            return
        if answer.status == 409:
            delay = next(delays)
            log.info("%s: %s; again in %.1f s", run.path, Refusal.of(409, answer.body), delay)
            yield Sleep(delay)
            continue
        if answer.status != 200:
            raise SubscriptionError(
                f"GET {run.path}/events: {Refusal.of(answer.status, answer.body)}"
            )
        delays = settings.backoff.delays()
        state.stream_id = answer.headers.get(STREAM_ID_HEADER, "")
        yield from _batches(run, state.stream_id)
        yield Close()
        state.stream_id = None


def _batches(run: SubscriptionRun, stream_id: str) -> Generator[Effect, Any, None]:
    """One stream's batches, until it ends or a commit says it is over."""
    lines = Lines()
    while not run.state.stopping:
        piece = yield Read()
        if isinstance(piece, Failure):
            log.warning("stream %s broke off (%s): opening another", stream_id, piece)
            return
        if not piece:
            log.info("the broker ended stream %s: opening another", stream_id)
            return
        for line in lines.feed(piece):
            if not line.strip():
                continue
            batch = batch_of(line, stream_id)
            if not batch.events:  # a keep-alive
                continue
            yield Emit(batch)
            committed = yield from _commit(run, batch)
            if not committed or run.state.stopping:
                return


def _commit(run: SubscriptionRun, batch: EventBatch) -> Generator[Effect, Any, bool]:
    """Commit the handled batch's cursor; False when the stream can no longer commit (its
    session is gone): its events after the last commit will be delivered again."""
    settings = run.settings
    deadline = time.monotonic() + settings.commit_timeout()
    body = {"items": [batch.cursor.as_json()]}
    headers = {STREAM_ID_HEADER: batch.stream_id}
    answer = yield from exchange(
        lambda base: Call("POST", base + run.path + "/cursors", (), headers, body),
        run.endpoints,
        settings.backoff,
        lambda: time.monotonic() > deadline,
    )
    if answer is None:
        log.warning(
            "no commit of %s within commit_timeout: its events will be delivered again",
            batch.cursor,
        )
        return False
    if answer.status in (200, 204):  # 200: some were committed already ("outdated")
        return True
    refusal = Refusal.of(answer.status, answer.body)
    if answer.status in (409, 422):
        log.warning(
            "commit of %s refused (%s): stream %s is over, its uncommitted events will be"
            " delivered again",
            batch.cursor,
            refusal,
            batch.stream_id,
        )
        return False
    raise SubscriptionError(f"POST {run.path}/cursors: {refusal}")
