"""The HTTP API: ``GET /changes`` (transicator's, exactly), ``/diagnostics/stack`` and
``/health`` ``/ready`` ``/markdown``.

One extension transicator clients never send: ``GET /changes?table=<glob>`` (repeatable,
``fnmatch`` globs of ``schema.table``) serves every change of the matching tables whatever
its selector, and no scope or selector may be given with it. The bridge reads this way.

A TRUNCATE, DROP TABLE, or ALTER TABLE after which earlier changes no longer describe the
rows (``ddl.py``) may have removed rows a selector's reader holds: a read with a ``since``
before it (or a ``snapshot`` that does not see it) answers ``SNAPSHOT_TOO_OLD``, transicator's
signal to take a snapshot again, and its long polls are woken to hear so.

Long polling: a request with nothing to return registers one waiter under each
of its selectors; the replication thread, after each durable batch, wakes the
waiters of the selectors it wrote through ``loop.call_soon_threadsafe``. No
polling loop, and an idle waiter costs a future, a small object and a few set entries.
A woken waiter whose answer is ready writes it to its connection there and then
(``http.RESPOND``): one commit's answer is rendered once per query and written to
every waiting connection in one pass; only then are the requests' tasks woken.
"""

from __future__ import annotations

import asyncio
import gc
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from changebroker import http
from changebroker import transicator_pb2 as pb
from changeserver import changes, diagnostics, metrics
from changeserver.changelog import Bounds, LogReader, Snapshot
from changeserver.pgoutput import NO_SELECTOR, RESET_EVERY, RESET_UNSELECTED
from changeserver.sequence import ZERO, Sequence

JSON = "application/json"
PROTOBUF = "application/transicator+protobuf"
COMPACT = changes.COMPACT  # the bridge's: the stored bodies as they are
DEFAULT_LIMIT = 100
MAX_LIMIT = 100_000
_SELECTOR = re.compile(r"^[0-9a-z_-]+$")
_MAX_ANSWERS = 10_000  # distinct queries remembered between two writes to the change log
ANY_SELECTOR = "*"  # the waiters of ``table`` queries: woken by every durable batch


class Waiter(Protocol):
    """A blocked request, woken once on the event loop when its selectors have news."""

    def answer(self) -> None:
        """Write the answer to the connection now, if it is final."""

    def release(self) -> None:
        """Let the request's task go on (after every waiter woken with it has answered)."""


class Waiters:
    """Long-poll waiters keyed by selector, woken from the replication thread."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.by_selector: dict[str, set[Waiter]] = {}
        self.wakes = 0  # how many batches have woken waiters so far
        self.waiting = 0  # long polls registered now (one may wait on several selectors)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def notify_threadsafe(self, selectors: set[str]) -> None:
        """Called by the replication thread once ``selectors`` have new durable changes."""
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._wake, selectors)

    def _wake(self, selectors: set[str]) -> None:
        self.wakes += 1
        # A table event: every poll that may hold the table's rows learns it is too old.
        if RESET_EVERY in selectors:
            selectors = set(self.by_selector)
        elif RESET_UNSELECTED in selectors:
            selectors = {*selectors, NO_SELECTOR}
        # A set: a long poll waiting on several of these selectors is woken (and counted) once.
        woken: set[Waiter] = set()
        for selector in (*selectors, ANY_SELECTOR):
            woken |= self.by_selector.pop(selector, set())
        # The pass writes every answer at once (``http.Respond``); a full collection in the
        # middle of it, which walks every object thousands of open connections hold (0.2 s
        # with 5,000), would hold back the answers not yet written: it runs after them.
        collecting = gc.isenabled()
        gc.disable()
        try:
            # Every answer first: the last one written waits for the writes alone, not also
            # for each request's wake-up (a task scheduled per waiter).
            for waiter in woken:
                waiter.answer()
            for waiter in woken:
                waiter.release()
        finally:
            if collecting:
                gc.enable()
        metrics.longpoll_wakeups.inc(len(woken))

    def wake_all(self) -> None:
        """Every waiter answers now (the server is stopping)."""
        self._wake(set(self.by_selector))

    def register(self, selectors: list[str], waiter: Waiter) -> None:
        for selector in selectors:
            self.by_selector.setdefault(selector, set()).add(waiter)
        self.waiting += 1

    def unregister(self, selectors: list[str], waiter: Waiter) -> None:
        self.waiting -= 1
        for selector in selectors:
            waiting = self.by_selector.get(selector)
            if waiting is not None:
                waiting.discard(waiter)
                if not waiting:
                    del self.by_selector[selector]

    def by_selector_counts(self, limit: int) -> dict[str, int]:
        """The ``limit`` selectors most long polls wait on now, with how many wait."""
        counts = sorted(((len(f), s) for s, f in self.by_selector.items()), reverse=True)
        return {selector: count for count, selector in counts[:limit]}


@dataclass
class State:
    """What /ready and /markdown report and change."""

    streaming: threading.Event  # set while the replication stream is up
    # Why replication stopped for good (a lost slot under the "fail" policy), if it did.
    failure: Callable[[], str | None] = lambda: None
    marked_down: bool = False
    waiters: Waiters = field(default_factory=Waiters)


class BadRequest(Exception):
    def __init__(self, status: int, code: str, error: str, description: str = "") -> None:
        super().__init__(error)
        self.status, self.code, self.error, self.description = status, code, error, description


def error_response(
    status: int,
    code: str,
    error: str,
    description: str = "",
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = {"code": code, "error": error, "description": description or error}
    return JSONResponse(body, status_code=status, headers=headers)


def refuse(status: int, message: str) -> Response:
    """A request refused by authentication (401) or for a missing scope (403)."""
    if status == 401:
        return error_response(401, "UNAUTHORIZED", message, headers={"WWW-Authenticate": "Bearer"})
    return error_response(403, "FORBIDDEN", message)


async def http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths and methods answer in transicator's error shape, like every other error."""
    assert isinstance(exc, HTTPException)
    code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(exc.status_code, "BAD_REQUEST")
    return error_response(exc.status_code, code, exc.detail, headers=exc.headers)


EXCEPTION_HANDLERS = {HTTPException: http_error}


def _media_type(accept: str, served: tuple[str, ...]) -> str:
    """JSON unless the Accept header prefers another of ``served``; 415 when none fits."""
    if not accept.strip():
        return JSON
    for quality, name in http.accepted(accept):
        if quality == 0:
            break
        if name in served:
            return name
        if name in (JSON, "application/*", "*/*"):
            return JSON
    raise BadRequest(415, "UNSUPPORTED_FORMAT", f"unsupported media type: {accept}")


_GO_INT = re.compile(r"^[+-]?[0-9]+$")  # what transicator's strconv.ParseInt(s, 10, 32) takes


def _first(request: Request, name: str) -> str:
    """A parameter's first value, as transicator's ``url.Values.Get`` reads it ("" if absent)."""
    values = request.query_params.getlist(name)
    return values[0] if values else ""


def _integer(request: Request, name: str, default: int) -> int:
    """A 32-bit integer, any sign, as transicator parses ``limit`` and ``block``."""
    raw = _first(request, name)
    if raw == "":
        return default
    if not _GO_INT.match(raw) or not -(2**31) <= int(raw) < 2**31:
        raise BadRequest(400, "PARAMETER_INVALID", f"invalid {name}: {raw!r}")
    return int(raw)


@dataclass(frozen=True)
class Query:
    selectors: list[str]
    since: Sequence
    limit: int
    block: int
    snapshot: Snapshot | None
    media_type: str
    tables: tuple[str, ...] = ()  # the ``table`` extension: every change of these tables


def parse_query(request: Request, served: tuple[str, ...] = (JSON, PROTOBUF)) -> Query:
    """The query of ``/changes`` (or ``/snapshots``), answered in one of ``served``."""
    media_type = _media_type(request.headers.get("accept", ""), served)
    params = request.query_params
    selectors = sorted(set(params.getlist("scope") + params.getlist("selector")))
    for selector in selectors:
        if not _SELECTOR.match(selector):
            raise BadRequest(
                400, "PARAMETER_INVALID", f"invalid selector {selector!r}: use [0-9a-z_-]"
            )
    tables = tuple(sorted(set(params.getlist("table"))))
    if tables:
        # The extension: every change of the named tables, whatever its selector.
        if selectors:
            raise BadRequest(
                400, "PARAMETER_INVALID", "table reads every selector: give no scope or selector"
            )
        if _first(request, "snapshot"):
            raise BadRequest(400, "PARAMETER_INVALID", "table cannot be combined with snapshot")
        selectors = [ANY_SELECTOR]
    # None named: the changes of rows without a selector (NULL, empty, or no such column).
    selectors = selectors or [NO_SELECTOR]
    since = ZERO
    if raw_since := _first(request, "since"):
        try:
            since = Sequence.parse(raw_since)
        except ValueError as error:
            raise BadRequest(400, "PARAMETER_INVALID", str(error)) from None
    snapshot = None
    if raw_snapshot := _first(request, "snapshot"):
        try:
            snapshot = Snapshot.parse(raw_snapshot)
        except ValueError:
            raise BadRequest(
                400, "PARAMETER_INVALID", f"invalid snapshot {raw_snapshot!r}"
            ) from None
    # Zero or negative: no changes, only the bounds (as transicator answers).
    limit = _integer(request, "limit", DEFAULT_LIMIT)
    if limit > MAX_LIMIT:
        raise BadRequest(400, "PARAMETER_INVALID", f"limit too high, exceeds max {MAX_LIMIT}")
    block = _integer(request, "block", 0)
    return Query(selectors, since, limit, block, snapshot, media_type, tables)


# An answer: (any changes?, behind the query's ``since``?, body, response headers, the same as
# lines for ``http.RESPOND``), shared by identical queries.
Answer = tuple[bool, bool, bytes, list[tuple[bytes, bytes]], bytes]


class ChangesEndpoint:
    """``/changes`` as a plain ASGI app.

    One commit can wake thousands of long polls at once; each then sends the answer they
    share, with its headers built once, straight to the server: no Response object or
    request/response wrapper per waiter.
    """

    def __init__(self, state: State, reader: LogReader) -> None:
        self.state = state
        self.reader = reader
        self._version = -1
        self._answers: dict[tuple[Any, ...], Answer] = {}
        self._checked_wake = -1  # the wake in which the log's version was last read

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.state.marked_down:
            metrics.refusals.labels("MARKED_DOWN").inc()
            response = error_response(503, "MARKED_DOWN", "the server is marked down")
            await response(scope, receive, send)
            return
        try:
            # No local holds the request: a blocked poll keeps only its query, not the
            # request's parsed headers and query string.
            query = parse_query(Request(scope), (JSON, PROTOBUF, COMPACT))
            respond = (scope.get("extensions") or {}).get(http.RESPOND)
            answer = await self._changes(query, respond)
        except BadRequest as bad:
            metrics.refusals.labels(bad.code).inc()
            response = error_response(bad.status, bad.code, bad.error, bad.description)
            await response(scope, receive, send)
            return
        if answer is None:
            return  # written when the waiter was woken
        _, _, body, headers, head = answer
        if respond is not None and respond(200, head, body):
            return
        await send({"type": "http.response.start", "status": 200, "headers": list(headers)})
        await send({"type": "http.response.body", "body": body})

    def _read(self, query: Query) -> tuple[Bounds, list[tuple[int, int, int, bytes]]]:
        if query.tables:
            bounds, rows = self.reader.read_tables(query.tables, query.since, query.limit)
        else:
            bounds, rows = self.reader.read(
                query.selectors, query.since, query.limit, query.snapshot
            )
        if _too_old(query.since, bounds):
            raise BadRequest(
                400,
                "SNAPSHOT_TOO_OLD",
                f"changes after {query.since} are not held",
                f"the oldest sequence held is {bounds.first}",
            )
        if not query.tables and (query.since != ZERO or query.snapshot is not None):
            # Read after the rows: a table event written in between is not missed.
            reset = self.reader.reset_after(query.selectors, query.since, query.snapshot)
            if reset is not None:
                at, what = reset
                raise BadRequest(
                    400,
                    "SNAPSHOT_TOO_OLD",
                    f"rows after {query.since} may be gone or read otherwise: {what} at {at}",
                    "a TRUNCATE, DROP TABLE or ALTER TABLE changed rows these selectors may"
                    " hold: take a snapshot again",
                )
        return bounds, rows

    def _answer(self, query: Query, *, checked: bool = False) -> Answer:
        """(any changes?, behind?, body, headers, header lines), shared by identical queries
        until the change log changes.

        Behind: this server has not yet made durable the transaction ``since`` names (the
        client read it from another server of a fleet); such an answer holds no changes, and
        its ``lastSequence`` is ``since``, never a position before the client's own.

        When a batch wakes thousands of waiters on one selector, they all ask the same
        question: the first reads and renders, the rest reuse its bytes. ``checked``: the
        log's version was read in this same pass over woken waiters (once is enough).
        """
        if not checked:
            version = self.reader.version()
            if version != self._version or len(self._answers) > _MAX_ANSWERS:
                self._answers.clear()
                self._version = version
        key = (
            tuple(query.selectors),
            query.since,
            query.limit,
            query.snapshot,
            query.media_type,
            query.tables,
        )
        answer = self._answers.get(key)
        if answer is None:
            bounds, rows = self._read(query)
            body = _render(query, bounds, rows, self.reader.relation)
            headers = [
                (b"content-type", query.media_type.encode()),
                (b"content-length", str(len(body)).encode()),
            ]
            # A ``table`` read that only moved past other tables' changes has news too.
            found = bool(rows) or (bool(query.tables) and bounds.last > query.since)
            behind = query.since.lsn > bounds.durable
            answer = (found, behind, body, headers, http.header_lines(headers))
            self._answers[key] = answer
        return answer

    async def _changes(self, query: Query, respond: http.Respond | None) -> Answer | None:
        """The answer to send; None when a wake already wrote it through ``respond``."""
        answer = found, behind, _, _, _ = self._answer(query)
        if found or query.block <= 0:
            return answer
        version = self._version  # the change log's, as this answer read it
        # limit <= 0 never finds changes: like transicator, it waits for the next change on
        # its selectors (or block's end), once, and answers the bounds then.
        once = query.limit <= 0
        deadline = time.monotonic() + query.block
        waiters = self.state.waiters
        loop = asyncio.get_running_loop()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or http.draining.is_set() or self.state.marked_down:
                return answer
            # Behind ``since``: every durable batch may be the one that catches up, whatever
            # its selectors; once caught up, only the query's own selectors' news matters.
            selectors = query.selectors
            if behind and ANY_SELECTOR not in selectors:
                selectors = [*selectors, ANY_SELECTOR]
            waiter = _LongPoll(self, query, once, respond, loop.create_future())
            future = waiter.future
            waiters.register(selectors, waiter)
            try:
                # Ask again once registered: a batch made durable before is not missed.
                if once and not behind and self.reader.version() != version:
                    return self._answer(query)
                answer = found, now_behind, _, _, _ = self._answer(query)
                if found or (once and behind and not now_behind):
                    return answer
                if behind and not now_behind:
                    behind = False
                    continue  # caught up: wait on the query's own selectors
                # A timer on the future itself: cheaper than wait_for, per waiter.
                timer = loop.call_later(remaining, _expire, future)
                try:
                    if await future:
                        return None
                finally:
                    timer.cancel()
            finally:
                waiters.unregister(selectors, waiter)
            answer = found, now_behind, _, _, _ = self._answer(query)
            if found or (once and not now_behind):
                return answer
            behind = now_behind

    def _respond(self, query: Query, once: bool, respond: http.Respond) -> bool:
        """On a wake: write the answer now if it is final; False leaves it to the request."""
        waiters = self.state.waiters
        checked = self._checked_wake == waiters.wakes
        self._checked_wake = waiters.wakes
        try:
            found, behind, body, _, head = self._answer(query, checked=checked)
        except BadRequest:
            return False  # the request's task answers the error
        final = found or (once and not behind) or self.state.marked_down
        return final and respond(200, head, body)


class _LongPoll:
    """A blocked ``/changes`` request as its selectors' waiter: its future is True once a
    wake has written its answer, False when the request's task must answer itself."""

    __slots__ = ("endpoint", "future", "once", "query", "respond", "written")

    def __init__(
        self,
        endpoint: ChangesEndpoint,
        query: Query,
        once: bool,
        respond: http.Respond | None,
        future: asyncio.Future[bool],
    ) -> None:
        self.endpoint = endpoint
        self.query = query
        self.once = once
        self.respond = respond
        self.future = future
        self.written = False

    def answer(self) -> None:
        if self.respond is not None and not self.future.done():
            self.written = self.endpoint._respond(self.query, self.once, self.respond)

    def release(self) -> None:
        if not self.future.done():
            self.future.set_result(self.written)


def _too_old(since: Sequence, bounds: Bounds) -> bool:
    """Whether changes after ``since`` may be missing from the log.

    transicator's rule: ``since`` plus one index is older than ``firstSequence`` (so a
    ``since`` from before the log began is too old, purged or not). Exactly the newest
    purged change is not: a consumer there missed nothing. ``0.0.0`` (or none) means "from
    the beginning" and is never too old.
    """
    if since == ZERO or since == bounds.purged:
        return False
    return since < bounds.purged or Sequence(since.lsn, since.index + 1) < bounds.first


def _expire(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)


def _render(
    query: Query,
    bounds: Bounds,
    rows: list[tuple[int, int, int, bytes]],
    relations: changes.Relations,
) -> bytes:
    last = bounds.last
    if rows and len(rows) == query.limit:
        last = Sequence(rows[-1][0], rows[-1][1])
    # A server behind ``since`` (another server of a fleet answered it first) holds nothing
    # after it: the client stays where it is rather than be sent back to read changes again.
    last = max(last, query.since)
    if query.media_type == COMPACT:
        return changes.to_compact(bounds.first, last, rows, relations)
    if query.media_type == PROTOBUF:
        message = pb.ChangeListPb(
            firstSequence=str(bounds.first),
            lastSequence=str(last),
            changes=[changes.to_protobuf(*row, relations) for row in rows],
        )
        return message.SerializeToString()
    # As json.dumps(separators=(",", ":")) writes {"firstSequence", "lastSequence", "changes"}.
    listed = ",".join([changes.to_json(*row, relations) for row in rows])
    return (
        f'{{"firstSequence":"{bounds.first}","lastSequence":"{last}","changes":[{listed}]}}'
    ).encode()


def _status(request: Request, status: str, reason: str) -> Response:
    if JSON in request.headers.get("accept", ""):
        return JSONResponse({"status": status, "reason": reason}, status_code=503)
    return PlainTextResponse(reason, status_code=503)


async def _stack(request: Request) -> Response:
    return PlainTextResponse(diagnostics.stacks())


def stack_route(prefix: str) -> Route:
    """``/diagnostics/stack`` under ``prefix`` (transicator serves it beside /changes)."""
    return Route(base(prefix) + "/diagnostics/stack", _stack, methods=["GET"])


def management_routes(state: State) -> list[Route]:
    async def health(request: Request) -> Response:
        failure = state.failure()
        if failure is not None:
            return _status(request, "Down", failure)
        return PlainTextResponse("OK")

    async def ready(request: Request) -> Response:
        failure = state.failure()
        if failure is not None:
            return _status(request, "NotReady", failure)
        if state.marked_down:
            return _status(request, "NotReady", "marked down")
        if not state.streaming.is_set():
            return _status(request, "NotReady", "replication is not streaming")
        return PlainTextResponse("OK")

    async def markdown(request: Request) -> Response:
        # GET only, as transicator configures it: not even the HEAD that GET routes allow.
        if request.method != "GET":
            raise HTTPException(405, headers={"Allow": "GET"})
        state.marked_down = True
        # Parked long polls answer now, with what there is: their clients' next polls go to
        # a server that stays (the load balancer sees /ready 503 from now on).
        state.waiters.wake_all()
        return PlainTextResponse("marked down")

    return [
        Route("/health", health),
        Route("/ready", ready),
        Route("/markdown", markdown, methods=["GET"]),
    ]


def base(prefix: str) -> str:
    """``v1``, ``/v1`` and ``/v1/`` all give ``/v1``; none gives ``""``."""
    return "/" + prefix.strip("/") if prefix.strip("/") else ""


def changes_route(state: State, reader: LogReader, prefix: str) -> Route:
    """``/changes`` under ``prefix``."""
    return Route(base(prefix) + "/changes", ChangesEndpoint(state, reader), methods=["GET"])


class ChangesFirst:
    """``app``, but a GET or HEAD of ``route``'s exact path goes straight to its endpoint.

    Starlette's router and its middleware wrap every request and every send; answering long
    polls is most of this server's work, and their frames are a good part of what an idle
    waiter holds. Anything else (other methods: 405) is ``app``'s, as before.
    """

    def __init__(self, route: Route, app: ASGIApp) -> None:
        self.route = route
        self.path = route.path
        self.endpoint: ASGIApp = route.endpoint
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["path"] == self.path
            and scope["method"] in ("GET", "HEAD")
            and not scope.get("root_path")
        ):
            scope["route"] = self.route  # as the router names it: request metrics by route
            await self.endpoint(scope, receive, send)
        else:
            await self.app(scope, receive, send)
