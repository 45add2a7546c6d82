"""Nakadi's reading endpoints: the low-level stream, partitions and cursor operations.

Statuses follow Nakadi: a cursor the stream cannot start from is 412 (its
Problem says which and why), contradictory stream parameters are 422, an
unreadable X-Nakadi-Cursors header is 400; cursor operations answer 422 for
any cursor they cannot use. Nothing here writes: bad input changes nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
from confluent_kafka import KafkaException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from changebroker.auth import principal_of
from changebroker.broker import bodies, metrics
from changebroker.broker.access import Access
from changebroker.broker.avro.schemas import AvroSchemas
from changebroker.broker.errors import (
    BadRequest,
    BrokerError,
    EventTypeNotFound,
    NotFound,
    PreconditionFailed,
    Unavailable,
    Unprocessable,
)
from changebroker.broker.own_events.collector import OwnEvents
from changebroker.broker.streams.cursors import (
    Bounds,
    Cursor,
    CursorError,
    distance,
    lag,
    parse_cursor,
    parse_cursors,
    partition_view,
    position,
    shift,
)
from changebroker.broker.streams.event_stream import EventStream, Streamed, parse_limits
from changebroker.broker.streams.transcode import Transcoder
from changebroker.broker.timelines.clusters import Clusters
from changebroker.broker.timelines.model import Timelines
from changebroker.broker.timelines.store import TimelineStore
from changebroker.numerals import whole_number

log = logging.getLogger(__name__)

STREAM_MEDIA_TYPE = "application/x-json-stream"
# Keep-alives must reach the client at once, so every chunk ends in a sync flush; a fast
# level keeps the hot path cheap.
GZIP_LEVEL = 1

Endpoint = Callable[[Request], Awaitable[Response]]


class BatchStreamResponse(StreamingResponse):
    """Batch lines, gzipped when ``gzip``; counted in ``open_streams`` under ``kind`` while it
    runs, and :meth:`ended` runs whatever ends it (a limit, an error, a disconnect), shielded
    from the cancellation that may have ended it."""

    kind = ""

    def __init__(
        self,
        lines: AsyncIterator[bytes],
        gzip: bool,
        headers: dict[str, str] | None = None,
        media_type: str = STREAM_MEDIA_TYPE,
    ) -> None:
        headers = dict(headers or {})
        if gzip:
            headers["Content-Encoding"] = "gzip"
        body = _gzipped(lines) if gzip else lines
        super().__init__(body, media_type=media_type, headers=headers)

    async def ended(self) -> None:
        """Release what the stream held."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        open_streams = metrics.open_streams.labels(self.kind)
        open_streams.inc()
        try:
            await super().__call__(scope, receive, send)
        finally:
            open_streams.dec()
            with anyio.CancelScope(shield=True):
                await self.ended()


class _StreamResponse(BatchStreamResponse):
    """Closes the stream's consumer when the response ends."""

    kind = "low_level"

    def __init__(self, stream: EventStream, lines: AsyncIterator[bytes], gzip: bool) -> None:
        super().__init__(lines, gzip)
        self._stream = stream

    async def ended(self) -> None:
        self._stream.close()


async def _gzipped(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
    async for chunk in chunks:
        yield compressor.compress(chunk) + compressor.flush(zlib.Z_SYNC_FLUSH)
    yield compressor.flush()


def _wants_gzip(request: Request) -> bool:
    for part in request.headers.get("accept-encoding", "").split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() == "gzip" and params.replace(" ", "") not in ("q=0", "q=0.0"):
            return True
    return False


@contextlib.contextmanager
def cursor_errors_as(error: type[BrokerError]) -> Iterator[None]:
    """A :class:`CursorError` in the block answers as ``error``: the stream refuses a cursor
    with 412, cursor operations with 422, as Nakadi does."""
    try:
        yield
    except CursorError as exc:
        raise error(str(exc)) from None


@dataclass(frozen=True)
class Reading:
    timelines: TimelineStore
    clusters: Clusters
    access: Access
    memory_limit: int
    avro: AvroSchemas
    own: OwnEvents

    async def _readable(self, request: Request) -> Timelines:
        """The event type the path names (else 404), if the caller may read it (else 403)."""
        name = request.path_params["name"]
        timelines = await self._timelines(name)
        await self.access.require_event_type(principal_of(request), name, "read")
        return timelines

    async def _bounds(self, timelines: Timelines) -> dict[int, Bounds]:
        return await self.clusters.bounds(timelines, range(timelines.partitions))

    async def _timelines(self, name: str, missing: BrokerError | None = None) -> Timelines:
        """The event type's timelines; 404 (``missing``, else "EventType ... does not exist")
        when there is none."""
        found = await self.timelines.of(name)
        if found is None:
            raise missing or EventTypeNotFound(name)
        return found

    async def stream(self, request: Request) -> Response:
        name = request.path_params["name"]
        timelines = await self._timelines(name, missing=NotFound("topic not found"))
        principal = principal_of(request)
        await self.access.require_consume(principal, [name])
        limits = parse_limits(request.query_params)
        header = request.headers.get("x-nakadi-cursors")
        cursors: list[Cursor] | None = None
        if header is not None:
            try:
                items = json.loads(header)
            except ValueError:
                raise BadRequest("incorrect syntax of X-nakadi-cursors header") from None
            with cursor_errors_as(PreconditionFailed):
                cursors = parse_cursors(items, timelines)
        found = await self._bounds(timelines)
        with cursor_errors_as(PreconditionFailed):
            positions = (
                {c.partition: position(c, timelines, found[c.partition], name) for c in cursors}
                if cursors
                else {p: bound.newest for p, bound in found.items()}
            )

        async def follow() -> Timelines | None:
            return await self.timelines.of(name)

        streamed: Streamed = {}
        stream = EventStream(
            timelines,
            positions,
            limits,
            follow,
            memory_limit=self.memory_limit,
            blocked=self.access.consumption_blocked_check(principal, [name]),
            transcode=Transcoder(self.avro, [timelines], binary=False),
            streamed=streamed,
        )
        batches = self.access.guarded(stream.batches(), principal, [name])
        batches = self.own.data_streamed(batches, streamed, principal)
        return _StreamResponse(stream, batches, _wants_gzip(request))

    async def partitions(self, request: Request) -> Response:
        name = request.path_params["name"]
        timelines = await self._readable(request)
        consumed: dict[int, Cursor] = {}
        if "cursors" in request.query_params:
            try:
                items = json.loads(request.query_params["cursors"])
            except ValueError:
                raise BadRequest("cursors must be a URL-encoded JSON array of cursors") from None
            with cursor_errors_as(Unprocessable):
                consumed = {c.partition: c for c in parse_cursors(items, timelines)}
        found = await self._bounds(timelines)
        with cursor_errors_as(Unprocessable):
            views = [
                lag(consumed[p], timelines, bound, name)
                if p in consumed
                else partition_view(p, timelines, bound)
                for p, bound in found.items()
            ]
        return JSONResponse(views)

    async def partition(self, request: Request) -> Response:
        name, partition_text = request.path_params["name"], request.path_params["partition"]
        timelines = await self._readable(request)
        if not whole_number(partition_text) or int(partition_text) >= timelines.partitions:
            raise NotFound("partition not found")
        partition = int(partition_text)
        bound = (await self.clusters.bounds(timelines, [partition]))[partition]
        consumed_offset = request.query_params.get("consumed_offset")
        if consumed_offset is None:
            return JSONResponse(partition_view(partition, timelines, bound))
        with cursor_errors_as(Unprocessable):
            cursor = parse_cursor(
                {"partition": partition_text, "offset": consumed_offset}, timelines
            )
            return JSONResponse(lag(cursor, timelines, bound, name))

    async def _cursor_request(self, request: Request) -> tuple[Timelines, list[Any]]:
        """The event type and the JSON array body of a cursor operation."""
        timelines = await self._readable(request)
        body = await bodies.json_body(request)
        if not isinstance(body, list):
            raise Unprocessable("the body must be a JSON array")
        return timelines, body

    async def distances(self, request: Request) -> Response:
        timelines, queries = await self._cursor_request(request)
        name = timelines.event_type
        with cursor_errors_as(Unprocessable):
            pairs = []
            for query in queries:
                if not isinstance(query, dict):
                    raise CursorError(
                        "each query must be an object with initial_cursor and final_cursor"
                    )
                for required in ("initial_cursor", "final_cursor"):
                    if query.get(required) is None:
                        raise CursorError(f"{required} is required in every query")
                pairs.append(
                    (
                        parse_cursor(query["initial_cursor"], timelines),
                        parse_cursor(query["final_cursor"], timelines),
                    )
                )
            found = await self._bounds(timelines)
            results = [
                {
                    "initial_cursor": {"partition": a.partition_text, "offset": a.offset_text},
                    "final_cursor": {"partition": b.partition_text, "offset": b.offset_text},
                    "distance": distance(a, b, timelines, found[a.partition], name),
                }
                for a, b in pairs
            ]
        return JSONResponse(results)

    async def lags(self, request: Request) -> Response:
        timelines, items = await self._cursor_request(request)
        with cursor_errors_as(Unprocessable):
            cursors = parse_cursors(items, timelines)
            found = await self._bounds(timelines)
            views = [lag(c, timelines, found[c.partition], timelines.event_type) for c in cursors]
        return JSONResponse(views)

    async def shifts(self, request: Request) -> Response:
        timelines, items = await self._cursor_request(request)
        with cursor_errors_as(Unprocessable):
            shifted = []
            for item in items:
                # Nakadi's shift is a Java long: absent or null, it is 0.
                by = item.get("shift") if isinstance(item, dict) else None
                by = 0 if by is None else by
                if not isinstance(by, int) or isinstance(by, bool):
                    raise CursorError(f"each cursor needs a whole number shift, got {item!r}")
                shifted.append((parse_cursor(item, timelines), by))
            found = await self._bounds(timelines)
            cursors = [
                {
                    "partition": c.partition_text,
                    "offset": shift(c, by, timelines, found[c.partition], timelines.event_type),
                }
                for c, by in shifted
            ]
        return JSONResponse(cursors)


def _kafka_unavailable_is_503(endpoint: Endpoint) -> Endpoint:
    async def guarded(request: Request) -> Response:
        try:
            return await endpoint(request)
        except KafkaException as error:
            log.warning("Kafka unavailable", extra={"error": str(error)})
            raise Unavailable(f"Kafka did not answer ({error}); retry in a moment") from None

    return guarded


def routes(
    timelines: TimelineStore,
    clusters: Clusters,
    access: Access,
    memory_limit: int,
    avro: AvroSchemas,
    own: OwnEvents,
) -> list[BaseRoute]:
    """The reading endpoints; ``clusters`` is the app's, closed by its lifespan;
    ``memory_limit``: the bytes a stream holds for batches not yet due; ``avro``: the Avro
    schemas Avro events are read with; ``own``: where what a stream sent is told."""
    reading = Reading(timelines, clusters, access, memory_limit, avro, own)
    endpoints: list[tuple[str, Endpoint, str]] = [
        ("/event-types/{name}/events", reading.stream, "GET"),
        ("/event-types/{name}/partitions", reading.partitions, "GET"),
        ("/event-types/{name}/partitions/{partition}", reading.partition, "GET"),
        ("/event-types/{name}/cursor-distances", reading.distances, "POST"),
        ("/event-types/{name}/cursors-lag", reading.lags, "POST"),
        ("/event-types/{name}/shifted-cursors", reading.shifts, "POST"),
    ]
    return [
        Route(path, _kafka_unavailable_is_503(endpoint), methods=[method])
        for path, endpoint, method in endpoints
    ]
