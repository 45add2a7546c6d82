"""The low-level event stream: Kafka partitions assigned by offset, written as Nakadi batches.

One stream owns one confluent-kafka consumer (``assign()``, never a group
join or a commit) and one thread: polls run there so the event loop never
blocks, and the consumer is closed on that same thread once the stream ends,
whether by a limit, a timeout or the client going away.

Each line is ``{"cursor":{"partition":"0","offset":"001-0001-..."},"events":[...]}``;
events are the bytes stored in Kafka spliced in as they are (published JSON is
stored compact and valid, so nothing is parsed or re-serialised on this path).
A keep-alive is the same line without ``events``, cursor unchanged.

When a stream ends at its ``stream_timeout``, every partition whose batch is due sends it (a
keep-alive when it is empty), then every other partition with events waiting sends them, in
partition order, as Nakadi does. The events waiting for their batch are bounded in bytes (the
broker's ``--stream-memory-limit``): past it the partition holding the most sends early.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from confluent_kafka import Message

from changebroker import http
from changebroker.broker.consumer_tags import hidden
from changebroker.broker.errors import Unprocessable
from changebroker.broker.settings import STREAM_MEMORY_LIMIT
from changebroker.broker.streams.cursors import offset_text
from changebroker.broker.streams.timeline_reading import Assignment, Consumers, Readings
from changebroker.broker.streams.transcode import Transcoder
from changebroker.broker.timelines.model import Timelines

log = logging.getLogger(__name__)

DEFAULT_BATCH_FLUSH_TIMEOUT = 30.0
# Nakadi: 0 or unspecified is "1h ±10min"; above the maximum counts as unspecified.
DEFAULT_STREAM_TIMEOUT = 3600.0
MAX_STREAM_TIMEOUT = 4200.0
# Upper bound on one poll, so a stream notices its deadlines and a gone client promptly.
MAX_POLL_SECONDS = 0.5
MESSAGES_PER_POLL = 5000

STREAM_CONSUMER_SETTINGS: dict[str, object] = {
    # Retention deleting what a stream is about to read ends it rather than skipping silently.
    "auto.offset.reset": "error",
    # Catching-up streams fetch 4 MiB per partition and round trip (librdkafka: 1 MiB).
    "max.partition.fetch.bytes": 4 << 20,
    # Once its prefetch queue fills, librdkafka pauses fetching for this long (default
    # 1 s): a stream that drains the queue in bursts would stall for a second each time.
    "fetch.queue.backoff.ms": 20,
    # The prefetch queue's bound (librdkafka: 64 MiB per consumer): what a stream to a slow
    # client holds in memory while events wait, beside one fetch (4 MiB a partition). With
    # the default, a subscription stream read at 1 KB/s while 100 MB waited grew the process
    # by 123 MB; with 8 MiB by 47 MB. 8 MiB is still ~50 ms of a catching-up stream at
    # 150 MB/s, against fetch round trips of a few ms.
    "queued.max.messages.kbytes": 8 << 10,
}

# Streams currently holding a consumer; tests check it returns to zero after a disconnect.
open_streams = 0
_open_streams_lock = threading.Lock()


class LimitError(Unprocessable):
    """Stream parameters that contradict each other or are out of range."""


@dataclass(frozen=True)
class StreamLimits:
    batch_limit: int = 1
    stream_limit: int = 0
    batch_flush_timeout: float = DEFAULT_BATCH_FLUSH_TIMEOUT
    stream_timeout: float = DEFAULT_STREAM_TIMEOUT
    stream_keep_alive_limit: int = 0


def _number(query: Mapping[str, str], name: str, default: float) -> float:
    text = query.get(name)
    if text is None or text == "":
        return default
    try:
        value = float(text)
    except ValueError:
        raise LimitError(f"{name} must be a number, got {text!r}") from None
    if value < 0 or value != value or value == float("inf"):
        raise LimitError(f"{name} must be a number >= 0, got {text!r}")
    return value


def _integer(query: Mapping[str, str], name: str, default: int) -> int:
    value = _number(query, name, default)
    if value != int(value):
        raise LimitError(f"{name} must be a whole number, got {query.get(name)!r}")
    return int(value)


def parse_limits(query: Mapping[str, str], *, subscription: bool = False) -> StreamLimits:
    """The stream's query parameters with Nakadi's defaults and its consistency rules.

    A ``subscription`` stream may end before its first batch is due: it sends what waits when
    its stream_timeout comes (Nakadi refuses that only on the low-level stream).
    """
    batch_limit = _integer(query, "batch_limit", 1)
    if batch_limit < 1:
        raise LimitError("batch_limit can't be lower than 1")
    stream_limit = _integer(query, "stream_limit", 0)
    if stream_limit != 0 and stream_limit < batch_limit:
        raise LimitError("stream_limit can't be lower than batch_limit")
    flush = _number(query, "batch_flush_timeout", 0) or DEFAULT_BATCH_FLUSH_TIMEOUT
    stream_timeout = _number(query, "stream_timeout", 0)
    if stream_timeout == 0 or stream_timeout > MAX_STREAM_TIMEOUT:
        stream_timeout = DEFAULT_STREAM_TIMEOUT
    elif stream_timeout < flush and not subscription:
        raise LimitError("stream_timeout can't be lower than batch_flush_timeout")
    keep_alive_limit = _integer(query, "stream_keep_alive_limit", 0)
    return StreamLimits(batch_limit, stream_limit, flush, stream_timeout, keep_alive_limit)


@dataclass
class PartitionBatch:
    """One partition's progress: what was last sent, what waits, when it must be flushed.

    Offsets here are positions through the timelines (:mod:`changebroker.broker.timelines.model`):
    ``base`` turns the Kafka offsets of the topic being read into them, ``offset_text`` them
    into cursor offsets.
    """

    prefix: bytes
    last_offset: int
    offset_text: Callable[[int], str]
    flush_at: float
    base: int = 0
    keep_alives: int = 0
    pending: list[bytes] = field(default_factory=list)
    pending_bytes: int = 0
    # The most events one batch of this partition holds, 0 for batch_limit (a subscription
    # partition looking for a dead letter sends them one at a time).
    most: int = 0
    # The event type its batches are counted under (``Streamed``).
    label: str = ""
    # The offset of the last event sent: where a batch that only says something stands.
    sent: int = field(init=False)

    def __post_init__(self) -> None:
        self.sent = self.last_offset

    def cursor_end(self) -> bytes:
        """What closes the cursor after its offset (subscriptions add event_type and a token)."""
        return b'"}'

    def line(self, info: str | None = None) -> bytes:
        """The next batch (or keep-alive when nothing waits), with ``info.debug`` when given;
        resets the flush timer's state."""
        offset = self.offset_text(self.last_offset).encode()
        end = _end(info)
        if not self.pending:
            self.keep_alives += 1
            return self.prefix + offset + self.cursor_end() + end
        self.keep_alives = 0
        self.sent = self.last_offset
        events = b",".join(self.pending)
        self.pending = []
        self.pending_bytes = 0
        return self.prefix + offset + self.cursor_end() + b',"events":[' + events + b"]" + end

    def info_line(self, info: str) -> bytes:
        """A batch without events at the last sent cursor that only says ``info``."""
        offset = self.offset_text(self.sent).encode()
        return self.prefix + offset + self.cursor_end() + _end(info)


def _end(info: str | None) -> bytes:
    """What closes a batch line: its ``info`` object when there is one, and the newline."""
    if info is None:
        return b"}\n"
    return b',"info":' + json.dumps({"debug": info}).encode() + b"}\n"


PartitionKey = tuple[str, int]
# What a stream sent, per event type: [events, bytes of events, batches with events].
Streamed = dict[str, list[int]]


class Batcher:
    """Nakadi's batching over a set of partitions: batch_limit, flush timeouts, stream_limit,
    the keep-alive limit and the memory limit. Low-level and subscription streams both feed it
    polled messages.

    ``overflow_info``: what a batch sent early for the memory limit says (subscriptions);
    ``first_info``: what the stream's first line says unless it says something of its own.
    """

    def __init__(
        self,
        limits: StreamLimits,
        memory_limit: int = STREAM_MEMORY_LIMIT,
        *,
        overflow_info: str | None = None,
        first_info: str | None = None,
        streamed: Streamed | None = None,
        subscription_id: str | None = None,
    ) -> None:
        """``streamed``: where the batches sent are counted, when someone wants to know;
        ``subscription_id``: the subscription streamed (None: a low-level stream), which
        decides the consumer-tagged events it skips (:mod:`changebroker.broker.consumer_tags`)."""
        self.limits = limits
        self.subscription_id = subscription_id
        self.streamed = streamed
        self.memory_limit = memory_limit
        self.overflow_info = overflow_info
        self.first_info = first_info
        self.partitions: dict[PartitionKey, PartitionBatch] = {}
        self.accepted = 0
        self.sent = 0  # events in the lines emitted
        self.pending_bytes = 0  # of every partition's pending events

    def rekey(self, old: PartitionKey, new: PartitionKey) -> None:
        """A partition now read from another topic (the next timeline's), in the same place."""
        self.partitions = {(new if k == old else k): v for k, v in self.partitions.items()}

    def emit(self, state: PartitionBatch, info: str | None = None) -> bytes:
        """The partition's next line (see :meth:`PartitionBatch.line`)."""
        self.pending_bytes -= state.pending_bytes
        self.sent += len(state.pending)
        if self.streamed is not None and state.pending:
            counts = self.streamed.setdefault(state.label, [0, 0, 0])
            counts[0] += len(state.pending)
            counts[1] += state.pending_bytes
            counts[2] += 1
        line = state.line(info or self.first_info)
        self.first_info = None
        return line

    def info_line(self, state: PartitionBatch, info: str) -> bytes:
        """A line without events that only says ``info`` (see :meth:`PartitionBatch.info_line`)."""
        self.first_info = None
        return state.info_line(info)

    def take(self, messages: list[Message], allowed: int | None = None) -> tuple[list[bytes], bool]:
        """Lines of the batches these messages fill; True once stream_limit is reached.

        ``allowed``: how many events may still be sent (a subscription's
        max_uncommitted_events less what is uncommitted); a batch is full at
        ``min(batch_limit, allowed)``, as in Nakadi, and what it sends counts down.
        """
        limits = self.limits
        out: list[bytes] = []
        full_at = limits.batch_limit if allowed is None else min(limits.batch_limit, allowed)

        def send(state: PartitionBatch, info: str | None = None) -> None:
            nonlocal allowed, full_at
            if allowed is not None:
                allowed -= len(state.pending)
                full_at = max(min(limits.batch_limit, allowed), 1)
            out.append(self.emit(state, info))
            state.flush_at = time.monotonic() + limits.batch_flush_timeout

        for message in messages:
            error = message.error()
            if error is not None:
                raise RuntimeError(f"Kafka failed while streaming {message.topic()}: {error}")
            state = self.partitions.get((message.topic(), message.partition()))  # type: ignore[arg-type]
            value: bytes | None = message.value()
            if state is None or value is None or hidden(message, self.subscription_id):
                # Fetched before its partition was given up (subscription rebalance): not ours;
                # a tombstone of deleted-events, which readers never see (as in Nakadi); or
                # an event its publisher tagged for another subscription.
                continue
            state.pending.append(value)
            state.pending_bytes += len(value)
            self.pending_bytes += len(value)
            state.last_offset = state.base + message.offset()  # type: ignore[operator]
            self.accepted += 1
            if len(state.pending) >= full_at or (state.most and len(state.pending) >= state.most):
                send(state)
            while self.pending_bytes > self.memory_limit:
                heaviest = max(self.partitions.values(), key=lambda s: s.pending_bytes)
                send(heaviest, self.overflow_info)
            if limits.stream_limit and self.accepted >= limits.stream_limit:
                return out, True
        return out, False

    def due(self, now: float, stream_over: bool) -> list[bytes]:
        """Batches whose flush timeout passed (keep-alives if empty); when the stream is over,
        then every other batch with events waiting."""
        out: list[bytes] = []
        for state in self.partitions.values():
            if now >= state.flush_at:
                out.append(self.emit(state))
                state.flush_at = now + self.limits.batch_flush_timeout
        if stream_over:
            out += [self.emit(s) for s in self.partitions.values() if s.pending]
        return out

    def next_flush(self, bound: float) -> float:
        """When the next partition is due, ``bound`` at the latest."""
        return min([bound, *(s.flush_at for s in self.partitions.values())])

    def keep_alive_limit_reached(self) -> bool:
        """Nakadi ends the stream once every partition sent that many keep-alives in a row."""
        limit = self.limits.stream_keep_alive_limit
        # A partition holding events that are not yet due still has something to say.
        return (
            limit > 0
            and bool(self.partitions)
            and all(s.keep_alives >= limit and not s.pending for s in self.partitions.values())
        )


class EventStream:
    """Batches of one event type from the positions given (partition -> last consumed
    position), through its timelines: ``follow`` gives its timelines as they are now (read
    again when the event type's revision moves), so a switch while it streams is followed."""

    def __init__(
        self,
        timelines: Timelines,
        positions: Mapping[int, int],
        limits: StreamLimits,
        follow: Callable[[], Awaitable[Timelines | None]],
        *,
        memory_limit: int = STREAM_MEMORY_LIMIT,
        blocked: Callable[[], Awaitable[bool]] | None = None,
        transcode: Transcoder | None = None,
        streamed: Streamed | None = None,
    ) -> None:
        """``blocked``: asked before every poll; once it says so, the stream ends (Nakadi ends
        the stream of a consumer the blacklist blocks); ``transcode``: rewrites each poll's
        events for the reader (:mod:`changebroker.broker.streams.transcode`), told of every timeline
        the stream follows; ``streamed``: where what it sends is counted, under the event type's
        name."""
        self._timelines = timelines
        self._positions = dict(positions)
        self._limits = limits
        self._follow = follow
        self._memory_limit = memory_limit
        self._blocked = blocked
        self._transcode = transcode
        self._streamed = streamed
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"stream-{timelines.event_type}"
        )
        self._consumers: Consumers | None = None
        self._readings = Readings()
        self._closed = False

    def _open(self, add: list[Assignment]) -> None:
        global open_streams
        consumers = Consumers(STREAM_CONSUMER_SETTINGS)
        consumers.change(add, [])
        self._consumers = consumers
        with _open_streams_lock:
            open_streams += 1

    def _poll(self, timeout: float) -> list[Message]:
        assert self._consumers is not None
        return self._consumers.poll(timeout, MESSAGES_PER_POLL)

    def _change(self, add: list[Assignment], remove: list[Assignment]) -> None:
        assert self._consumers is not None
        self._consumers.change(add, remove)

    def _close_consumer(self) -> None:
        global open_streams
        if self._consumers is not None:
            self._consumers.close()
            self._consumers = None
            with _open_streams_lock:
                open_streams -= 1

    def close(self) -> None:
        """End the stream: the consumers close on its own thread after any poll in flight."""
        if not self._closed:
            self._closed = True
            self._executor.submit(self._close_consumer)
            self._executor.shutdown(wait=False)

    async def batches(self) -> AsyncIterator[bytes]:
        """Lines of batches, grouped per poll: each chunk is whole lines."""
        loop = asyncio.get_running_loop()
        limits = self._limits
        name = self._timelines.event_type
        try:
            started = time.monotonic()
            ends_at = started + limits.stream_timeout
            batcher = Batcher(limits, self._memory_limit, streamed=self._streamed)
            add = []
            for p, last in sorted(self._positions.items()):
                add.append(self._readings.start((name, p), self._timelines, last))
                batcher.partitions[self._readings.topic_key((name, p))] = PartitionBatch(
                    b'{"cursor":{"partition":"' + str(p).encode() + b'","offset":"',
                    last,
                    functools.partial(offset_text, self._timelines, partition=p),
                    started + limits.batch_flush_timeout,
                    base=self._readings.by_key[(name, p)].base,
                    label=name,
                )
            await loop.run_in_executor(self._executor, self._open, add)
            while True:
                if self._blocked is not None and await self._blocked():
                    return
                await self._move_on(batcher)
                now = time.monotonic()
                wait = min(max(batcher.next_flush(ends_at) - now, 0.0), MAX_POLL_SECONDS)
                messages = await loop.run_in_executor(self._executor, self._poll, wait)
                if self._transcode is not None:
                    await self._transcode(messages)
                out, limit_reached = batcher.take(messages)
                now = time.monotonic()
                # Asked to stop: what is batched goes out, then the stream ends whole.
                stream_over = limit_reached or now >= ends_at or http.draining.is_set()
                out += batcher.due(now, stream_over)
                if out:
                    yield b"".join(out)
                if stream_over or batcher.keep_alive_limit_reached():
                    return
        finally:
            self.close()

    async def _move_on(self, batcher: Batcher) -> None:
        """Partitions that reached the end of a closed timeline go on in the next one."""
        current = await self._follow()
        if current is not None and current is not self._timelines:
            self._timelines = current
            self._readings.follow(current)
            if self._transcode is not None:
                self._transcode.follow(current)
        if not self._readings.closing():
            return
        name = self._timelines.event_type
        states = {(name, partition): state for (_, partition), state in batcher.partitions.items()}
        ended = self._readings.ended({key: state.last_offset for key, state in states.items()})
        for key in ended:
            old_key = self._readings.topic_key(key)
            gone, added = self._readings.move_on(key, states[key].last_offset)
            await asyncio.get_running_loop().run_in_executor(
                self._executor, self._change, [added], [gone]
            )
            state = states[key]
            state.base = self._readings.by_key[key].base
            state.offset_text = functools.partial(offset_text, self._timelines, partition=key[1])
            batcher.rekey(old_key, self._readings.topic_key(key))
