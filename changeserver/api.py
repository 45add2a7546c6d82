"""``GET /changes``, transicator's, exactly: its answers, read from the change log and
rendered once per query until the log changes.

One extension transicator clients never send: ``GET /changes?table=<glob>`` (repeatable,
``fnmatch`` globs of ``schema.table``) serves every change of the matching tables whatever
its selector, and no scope or selector may be given with it. The bridge reads this way.

A TRUNCATE, DROP TABLE, or ALTER TABLE after which earlier changes no longer describe the
rows (``ddl.py``) may have removed rows a selector's reader holds: a read with a ``since``
before it (or a ``snapshot`` that does not see it) answers ``SNAPSHOT_TOO_OLD``, transicator's
signal to take a snapshot again, and its long polls are woken to hear so.

A request with nothing to return long polls (``longpoll.py``); the query is parsed in
``query.py``, errors answered by ``errors.py``, the management paths served by
``management.py``.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from changebroker import http
from changebroker import transicator_pb2 as pb
from changebroker.changeserver import changes, longpoll, metrics
from changebroker.changeserver.changelog import Bounds, LogReader
from changebroker.changeserver.errors import BadRequest, error_response
from changebroker.changeserver.management import State, base
from changebroker.changeserver.query import COMPACT, JSON, PROTOBUF, Answer, Query, parse_query
from changebroker.changeserver.sequence import ZERO, Sequence

_MAX_ANSWERS = 10_000  # distinct queries remembered between two writes to the change log


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
            # At once, or after a long poll (``block``); None: a wake wrote it already.
            answer = await longpoll.wait(self, self.state.waiters, query, respond)
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

    @property
    def version(self) -> int:
        return self._version

    def log_version(self) -> int:
        return self.reader.version()

    def marked_down(self) -> bool:
        return self.state.marked_down

    def answer(self, query: Query, *, checked: bool = False) -> Answer:
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

    def answer_on_wake(self, query: Query, once: bool, respond: http.Respond) -> bool:
        """On a wake: write the answer now if it is final; False leaves it to the request."""
        waiters = self.state.waiters
        checked = self._checked_wake == waiters.wakes
        self._checked_wake = waiters.wakes
        try:
            found, behind, body, _, head = self.answer(query, checked=checked)
        except BadRequest:
            return False  # the request's task answers the error
        final = found or (once and not behind) or self.state.marked_down
        return final and respond(200, head, body)


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
