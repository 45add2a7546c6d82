"""ASGI plumbing every HTTP service shares: X-Flow-Id, access lines, request durations,
serving, Accept.

Error bodies are not here on purpose: each API has its own error format
(transicator, Nakadi Problem, OpenSchema), and each service owns its own.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import socket
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import httptools
import uvicorn
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.server import ServerState
from uvicorn.supervisors.multiprocess import Multiprocess

from changebroker import logs, metrics
from changebroker.config import add_option, parse_duration

FLOW_ID_HEADER = "x-flow-id"
# The access line's status of a request whose client left before its body was read (nginx's).
CLIENT_LEFT = 499
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 60.0
DEFAULT_MAX_HEADER_BYTES = 64 * 1024
DEFAULT_IDLE_TIMEOUT = 5.0  # uvicorn's keep-alive default
# How long a draining service keeps an idle keep-alive connection open: a request its client
# sent as the drain began is answered (with ``connection: close``) instead of reset.
DRAIN_IDLE_GRACE = 0.5
# How long a draining worker waits for the others to stop listening before it drains anyway.
DRAIN_UNLISTEN_BOUND = 2.0
# How long a TLS close waits for the client's close_notify before it lets the client go.
TLS_CLOSE_WAIT = 0.5
access_log = logging.getLogger("changebroker.access")

# Set once the process is asked to stop (SIGTERM, SIGINT): endless responses (event streams)
# end after the batch they are on, so they end whole within the graceful shutdown's time.
draining = threading.Event()

# scope["extensions"][RESPOND]: ``respond(status, head, body) -> bool`` writes a whole
# response at once, from any callback on the server's event loop, without the request's own
# task: what lets one commit answer thousands of long polls in one pass (see
# ``UpgradeIgnoringProtocol.respond``). ``head`` is the response's own header lines
# (``header_lines``), content-length among them, connection not: rendered once, an answer
# many waiters share costs each of them a concatenation.
RESPOND = "changebroker.respond"
Respond = Callable[[int, bytes, bytes], bool]


def header_lines(headers: list[tuple[bytes, bytes]]) -> bytes:
    """``name: value\r\n`` for each header, as a response head spells them."""
    return b"".join([name + b": " + value + b"\r\n" for name, value in headers])


class OneWriteResponse(Response):
    """A ``Response`` written in one write (status line, headers and body) where the server
    offers ``RESPOND``: uvicorn's send writes the head and the body apart, two system calls,
    which is most of a small answer's cost. Elsewhere, sent as any response is."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        respond: Respond | None = (scope.get("extensions") or {}).get(RESPOND)
        if respond is None or not respond(
            self.status_code, header_lines(self.raw_headers), bytes(self.body)
        ):
            await super().__call__(scope, receive, send)


def accepted(accept: str) -> list[tuple[float, str]]:
    """An Accept header's media types (lower case) with their q values, the preferred first
    (equal q in the header's order); each service decides what it serves of them."""
    offers = []
    for position, part in enumerate(accept.split(",")):
        media, *params = (piece.strip() for piece in part.split(";"))
        quality = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        offers.append((-quality, position, media.lower()))
    return [(-negated, media) for negated, _, media in sorted(offers)]


class FlowIdMiddleware:
    """Take X-Flow-Id from the request (or make one), log it, echo it on the response; log
    the request and observe its duration (by route template: after routing, the scope names
    the route that served it)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = next(
            (v.decode("latin-1") for k, v in scope["headers"] if k == FLOW_ID_HEADER.encode()),
            None,
        )
        # 32 random hex digits, as uuid4().hex reads, in a quarter of its time (0.6 us).
        current = incoming or os.urandom(16).hex()
        token = logs.flow_id.set(current)
        started = time.perf_counter()
        status = 500

        async def send_with_flow_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                headers.append((b"x-flow-id", current.encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        extensions = scope.get("extensions") or {}
        if (respond := extensions.get(RESPOND)) is not None:

            def respond_with_flow_id(code: int, head: bytes, body: bytes) -> bool:
                nonlocal status
                flow_id = current.encode("latin-1")
                if not respond(code, b"%sx-flow-id: %s\r\n" % (head, flow_id), body):
                    return False
                status = code
                return True

            extensions[RESPOND] = respond_with_flow_id

        try:
            await self.app(scope, receive, send_with_flow_id)
        except ClientDisconnect:
            # Gone before its body was read (or cut off at the body timeout): nobody to answer,
            # nothing failed here.
            status = CLIENT_LEFT
        finally:
            seconds = time.perf_counter() - started
            metrics.observe_request(scope, status, seconds)
            if access_log.isEnabledFor(logging.INFO):
                request = {"method": scope["method"], "path": scope["path"]}
                if query := scope.get("query_string"):
                    # As the handlers read it: percent-decoded (the log line escapes).
                    request["query"] = urllib.parse.unquote(query.decode("latin-1"))
                fields = logs.fields(**request, status=status, ms=round(seconds * 1000, 2))
                # makeRecord, not info(): the caller's file and line, which no line shows,
                # cost a stack walk per request (a tenth of a woken long poll's CPU).
                record = access_log.makeRecord(
                    access_log.name, logging.INFO, __file__, 0, "request", (), None, extra=fields
                )
                access_log.handle(record)
            logs.flow_id.reset(token)


# The server's default headers (Date, Server, configured ones) as lines, for the list they
# were rendered from: uvicorn replaces the list when the second changes.
_defaults_rendered: tuple[list[tuple[bytes, bytes]], bytes] = ([], b"")


def _default_header_lines(server_state: ServerState) -> bytes:
    """The server's default headers as they are now: a long poll answered minutes after it
    arrived is dated when it is answered."""
    global _defaults_rendered
    defaults, rendered = server_state.default_headers, _defaults_rendered
    if rendered[0] is not defaults:
        rendered = _defaults_rendered = (defaults, header_lines(defaults))
    return rendered[1]


# Responses ``respond`` wrote outside any task in this turn of each event loop, completed in
# the next turn, before the tasks the same pass woke.
_ANSWERED: dict[
    asyncio.AbstractEventLoop, list[tuple[UpgradeIgnoringProtocol, RequestResponseCycle]]
] = {}


def _complete_answered(loop: asyncio.AbstractEventLoop) -> None:
    for protocol, cycle in _ANSWERED.pop(loop):
        protocol._complete(cycle)


class _Responder:
    """A request's ``RESPOND``, holding its connection and cycle weakly. The scope holds it
    and the cycle holds the scope: a strong reference back made every request a reference
    cycle, which only the cycle collector frees (~20 objects a request; with the broker's
    raised threshold, one collection of 20,000 objects paused every request in flight for
    up to 17 ms). uvicorn itself drops its cycle's reference to the connection when the
    request ends, for the same reason."""

    __slots__ = ("_cycle", "_protocol")

    def __init__(self, protocol: UpgradeIgnoringProtocol, cycle: RequestResponseCycle) -> None:
        self._protocol = weakref.ref(protocol)
        self._cycle = weakref.ref(cycle)

    def __call__(self, status: int, head: bytes, body: bytes) -> bool:
        protocol, cycle = self._protocol(), self._cycle()
        if protocol is None or cycle is None:
            return False
        return protocol.respond(cycle, status, head, body)


# What a request asking for an upgrade we do not serve loses: the upgrade headers.
_UPGRADE_HEADERS = (b"upgrade", b"http2-settings")


class UpgradeIgnoringProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, serving a request that asks for an unsupported upgrade
    (``Upgrade: h2c``, sent by the JDK's HttpClient) as the HTTP/1.1 request it also is.

    llhttp stops parsing at the end of an upgrade request's headers and hands the rest of
    the bytes over as the new protocol's; uvicorn then runs the request without its body
    (and reads the body as the next request). RFC 9110 §7.8 lets a server ignore an
    upgrade: the request is parsed again here, without its upgrade headers, body and all.
    WebSocket upgrades, which no service serves, go the same way.

    Every request's scope also offers ``RESPOND``: its whole response written at once.
    """

    _reparsing = False
    # A request's head must arrive within this time and size, and its body within
    # ``body_timeout`` of the head: a client that sends either byte by byte, or sends endless
    # headers, is answered 408 / 431 and its connection closed.
    header_timeout = DEFAULT_HEADER_TIMEOUT
    body_timeout = DEFAULT_BODY_TIMEOUT
    max_header_bytes = DEFAULT_MAX_HEADER_BYTES
    _header_deadline: asyncio.TimerHandle | None = None
    _body_deadline: asyncio.TimerHandle | None = None
    _header_bytes = 0
    _refused = False
    _draining = False
    _head_begun = False
    _lost = False
    _closing_soon = False  # answered with ``connection: close``; closed once complete

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._disarm_header_deadline()
        self._disarm_body_deadline()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = 0
        self._head_begun = True
        self._arm_header_deadline()

    def on_url(self, url: bytes) -> None:
        if self._within_header_limit(len(url)):
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._within_header_limit(len(name) + len(value)):
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm_header_deadline()
        self._head_begun = False
        if self._refused:
            return
        # CONNECT is an upgrade to llhttp whatever its headers: left to uvicorn.
        self._reparsing = self.parser.should_upgrade() and self.parser.get_method() != b"CONNECT"
        if not self._reparsing:
            super().on_headers_complete()
            self._arm_body_deadline()
            cycle = self.cycle
            if cycle is not None and cycle.scope is self.scope:
                scope: dict[str, Any] = self.scope  # type: ignore[assignment]
                scope.setdefault("extensions", {})[RESPOND] = _Responder(self, cycle)
                if self._draining:
                    cycle.keep_alive = False

    def shutdown(self) -> None:
        """The server drains: once no process listens at its address any more (see
        ``_until_nobody_listens``), a connection busy with a request closes after its
        response, as in uvicorn. An idle one is not closed at once, as uvicorn would: its
        client may have sent a request already, which a close would answer with a reset (and
        a client can retry only what it knows was not sent). It is closed once it has been
        idle for ``DRAIN_IDLE_GRACE``; a request arriving before that is answered, and the
        connection closed after it."""
        if self.config.workers <= 1:
            # The listener was this process's own, closed in the step that called this one: a
            # request read after it is answered with ``connection: close`` (a probe's wait
            # would leave it answered as if nothing had begun).
            self._drain()
            return
        nobody_listens = _NOBODY_LISTENS.get(self.server_state)
        if nobody_listens is None:
            # The connection's own address is the one its server listens at.
            family = self.transport.get_extra_info("socket").family
            address = self.transport.get_extra_info("sockname")
            nobody_listens = self.loop.create_task(
                _until_nobody_listens(self.loop, family, address)
            )
            _NOBODY_LISTENS[self.server_state] = nobody_listens
        nobody_listens.add_done_callback(lambda _: self._drain())

    def _drain(self) -> None:
        self._draining = True
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.keep_alive = False
        else:
            self.loop.call_later(DRAIN_IDLE_GRACE, self._close_if_idle)

    def _close_if_idle(self) -> None:
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if self._head_begun or (cycle is not None and not cycle.response_complete):
            return  # a request came: its response closes the connection
        self._close()

    def _close(self) -> None:
        """Close the connection, sending what is buffered first. A TLS close sends
        close_notify, then waits for the client's, which a client that is not reading (an
        idle one, a refused one) never sends: a draining server would wait out its timeout.
        TLS lets the closing side go without it (RFC 8446 §6.1)."""
        self.transport.close()
        if self.transport.get_extra_info("ssl_object") is not None:
            self.loop.call_later(TLS_CLOSE_WAIT, self._abort_once_sent)

    def _abort_once_sent(self) -> None:
        if self._lost:
            return
        if self.transport.get_write_buffer_size():
            # Still sending what the client was answered: try again later.
            self.loop.call_later(TLS_CLOSE_WAIT, self._abort_once_sent)
            return
        self.transport.abort()

    def respond(
        self,
        cycle: RequestResponseCycle,
        status: int,
        head: bytes,
        body: bytes,
    ) -> bool:
        """What uvicorn's ``send`` writes for a start and a final body, in one write and
        synchronously; False (nothing written) when the client left or a response began.

        Called from the request's own task, the response is complete when this returns, as
        uvicorn requires before the application returns. Called outside any task (one
        commit's pass over thousands of long polls, whose tasks wait for it), the response
        is completed after the pass, all together: the pass then spends on each waiter the
        write alone, and a connection the answer ends is closed after every answer is
        written (closing cost as much as writing, so the last client waited twice as long).
        Nothing the client sends after the answer is read."""
        if cycle.disconnected or cycle.response_started or self.transport.is_closing():
            return False
        cycle.response_started = True
        self.transport.write(
            b"".join(
                (
                    STATUS_LINE[status],
                    _default_header_lines(self.server_state),
                    head,
                    b"" if cycle.keep_alive else b"connection: close\r\n",
                    b"\r\n",
                    b"" if cycle.scope["method"] == "HEAD" else body,
                )
            )
        )
        if not cycle.keep_alive:
            self._closing_soon = True
        if asyncio.current_task(self.loop) is not None:
            self._complete(cycle)
            return True
        answered = _ANSWERED.get(self.loop)
        if answered is None:
            answered = _ANSWERED[self.loop] = []
            self.loop.call_soon(_complete_answered, self.loop)
        answered.append((self, cycle))
        return True

    def _complete(self, cycle: RequestResponseCycle) -> None:
        """The response written by ``respond`` is over: what uvicorn's ``send`` does after
        a final body."""
        cycle.response_complete = True
        cycle.message_event.set()
        if not cycle.keep_alive:
            self._close()
        cycle.on_response()

    def _within_header_limit(self, size: int) -> bool:
        self._header_bytes += size
        if self._header_bytes > self.max_header_bytes and not self._refused:
            self._refuse(b"431 Request Header Fields Too Large", "request head too large")
        return not self._refused

    def _arm_header_deadline(self) -> None:
        if self._header_deadline is None:
            self._header_deadline = self.loop.call_later(
                self.header_timeout, self._headers_too_slow
            )

    def _disarm_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        self._refuse(b"408 Request Timeout", "request head not received in time")

    def _arm_body_deadline(self) -> None:
        self._disarm_body_deadline()
        self._body_deadline = self.loop.call_later(self.body_timeout, self._body_too_slow)

    def _disarm_body_deadline(self) -> None:
        if self._body_deadline is not None:
            self._body_deadline.cancel()
            self._body_deadline = None

    def _body_too_slow(self) -> None:
        self._body_deadline = None
        cycle = self.cycle
        if self.flow.read_paused or (cycle is not None and cycle.waiting_for_100_continue):
            # The server is not reading yet (the app has not taken what came, or not asked
            # for the body): the client is not the slow one.
            self._arm_body_deadline()
            return
        if cycle is not None and cycle.response_started:
            # Answered already without the body (a refusal): the rest is not waited for.
            self._refused = True
            self.logger.warning(
                "request body not received in time", extra=logs.fields(client=self.client)
            )
            self._close()
            return
        if cycle is not None:
            # The app waiting for the body ends now (``http.disconnect``) instead of at close.
            cycle.disconnected = True
            cycle.message_event.set()
        self._refuse(b"408 Request Timeout", "request body not received in time")

    def _refuse(self, status: bytes, reason: str) -> None:
        """Answer ``status`` and close: the client held the connection without a request."""
        self._refused = True
        self.logger.warning(reason, extra=logs.fields(client=self.client))
        if not self.transport.is_closing():
            self.transport.write(
                b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            )
            self._close()

    def on_body(self, body: bytes) -> None:
        if not self._reparsing and not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._disarm_body_deadline()
        if not self._reparsing and not self._refused:
            super().on_message_complete()

    def data_received(self, data: bytes) -> None:
        if self._refused or self._closing_soon:
            return
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            if not self._reparsing:
                self._unsupported_upgrade_warning()
                return
            request = self._without_upgrade(data[upgrade.args[0] :])
            self._reparsing = False
            self.parser = httptools.HttpRequestParser(self)
            # As uvicorn sets up its own parser: answer a pipelined request's first response.
            self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
            self.data_received(request)
        except httptools.HttpParserError:
            message = "Invalid HTTP request received."
            self.logger.warning(message)
            self.send_400_response(message)

    def _without_upgrade(self, rest: bytes) -> bytes:
        """The request's head again, minus its upgrade headers, then what followed it."""
        version = self.parser.get_http_version().encode()
        head = [self.parser.get_method(), b" ", self.url, b" HTTP/", version, b"\r\n"]
        for name, value in self.headers:
            if name in _UPGRADE_HEADERS:
                continue
            if name == b"connection":
                tokens = [t.strip() for t in value.split(b",")]
                value = b", ".join(t for t in tokens if t.lower() not in _UPGRADE_HEADERS)
                if not value:
                    continue
            head += [name, b": ", value, b"\r\n"]
        head.append(b"\r\n")
        return b"".join(head) + rest


# Per server: its connections drain once this is done.
_NOBODY_LISTENS: weakref.WeakKeyDictionary[ServerState, asyncio.Task[None]] = (
    weakref.WeakKeyDictionary()
)


async def _until_nobody_listens(
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


@dataclass(frozen=True)
class Tls:
    """A server's certificate chain and key (PEM): the port then speaks HTTPS only."""

    cert: Path
    key: Path

    def uvicorn_options(self) -> dict[str, str]:
        return {"ssl_certfile": str(self.cert), "ssl_keyfile": str(self.key)}


def add_tls_options(parser: argparse.ArgumentParser, *, server: bool = True) -> None:
    """``--tls-cert``/``--tls-key`` (a server's) and ``--tls-ca`` (what our clients trust)."""
    if server:
        for flag, what in [("--tls-cert", "certificate chain"), ("--tls-key", "private key")]:
            add_option(
                parser, flag, scope="", type=Path, help=f"serve HTTPS with this {what} (PEM)"
            )
    add_option(
        parser,
        "--tls-ca",
        scope="",
        type=Path,
        help="CA certificates (PEM) our HTTPS clients trust besides the system's",
    )


def tls_of(args: argparse.Namespace) -> Tls | None:
    """The TLS files the flags name, or None; both or neither must be given."""
    if (args.tls_cert is None) != (args.tls_key is None):
        raise SystemExit("give both --tls-cert and --tls-key, or neither")
    return Tls(args.tls_cert, args.tls_key) if args.tls_cert is not None else None


@dataclass(frozen=True)
class ConnectionLimits:
    """How long and how large a request's head may be, and how long an idle connection stays."""

    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT

    def protocol(self) -> type[UpgradeIgnoringProtocol]:
        limits = {
            "header_timeout": self.header_timeout,
            "max_header_bytes": self.max_header_bytes,
            "body_timeout": self.body_timeout,
        }
        if limits == {name: getattr(UpgradeIgnoringProtocol, name) for name in limits}:
            return UpgradeIgnoringProtocol
        return type("LimitedProtocol", (UpgradeIgnoringProtocol,), limits)


def add_server_options(parser: argparse.ArgumentParser) -> None:
    """What every service's HTTP server takes: TLS and the limits on its clients."""
    add_tls_options(parser)
    add_limit_options(parser)


def add_limit_options(parser: argparse.ArgumentParser) -> None:
    """``--header-timeout``, ``--body-timeout``, ``--max-header-bytes``, ``--idle-timeout``:
    what a slow or abusive client may hold of a server."""
    add_option(
        parser,
        "--header-timeout",
        scope="",
        type=parse_duration,
        default=DEFAULT_HEADER_TIMEOUT,
        help="a request's head must arrive within this (else 408 and the connection closes)",
    )
    add_option(
        parser,
        "--body-timeout",
        scope="",
        type=parse_duration,
        default=DEFAULT_BODY_TIMEOUT,
        help="a request's body must arrive within this of its head (else 408 and the"
        " connection closes)",
    )
    add_option(
        parser,
        "--max-header-bytes",
        scope="",
        type=int,
        default=DEFAULT_MAX_HEADER_BYTES,
        help="largest request head, URL and headers (else 431)",
    )
    add_option(
        parser,
        "--idle-timeout",
        scope="",
        type=parse_duration,
        default=DEFAULT_IDLE_TIMEOUT,
        help="an idle keep-alive connection is closed after this",
    )


def limits_of(args: argparse.Namespace) -> ConnectionLimits:
    return ConnectionLimits(
        args.header_timeout, args.max_header_bytes, args.idle_timeout, args.body_timeout
    )


def config(
    app: ASGIApp | str,
    host: str,
    port: int,
    *,
    tls: Tls | None = None,
    limits: ConnectionLimits = ConnectionLimits(),
    **options: Any,
) -> uvicorn.Config:
    """uvicorn's settings for every service (``options``: lifespan, graceful timeout, ...);
    ``app`` named by its import string is a worker's, which adds the flow-id middleware itself."""
    settings = _uvicorn_settings(tls, limits) | options
    served = app if isinstance(app, str) else FlowIdMiddleware(app)
    return uvicorn.Config(served, host=host, port=port, **settings)


def _uvicorn_settings(tls: Tls | None, limits: ConnectionLimits) -> dict[str, Any]:
    return {
        "http": limits.protocol(),
        "timeout_keep_alive": int(limits.idle_timeout) or 1,
        "ws": "none",  # no service serves WebSockets: their upgrades are ignored too
        "log_config": None,
        "access_log": False,
        **(tls.uvicorn_options() if tls is not None else {}),
    }


def _freeze_startup_objects() -> None:
    """Leave what start-up made (modules, settings, the app) out of every later garbage
    collection. Python's full collections walk every object the process holds: with the
    start-up's among them, the bridge spent a fifth of its CPU in them during a burst (one
    full collection ~66 ms, ~9 ms without; measured with gc.callbacks)."""
    gc.freeze()


def tune_gc() -> None:
    """For a process that allocates thousands of short-lived dicts a batch, which refcounting
    frees (the broker's publishing, the bridge's changes): at the default threshold (700) the
    cycle collector ran every few events, and each collection walked the batch in hand (the
    broker: ~1 us per published event, 5%; the bridge: 4-5% of its CPU over a burst, a full
    collection every ~15,000 changes). Cycles are still collected, once 20,000 objects
    accumulate, and what start-up created is frozen out of the full collections."""
    gc.freeze()
    gc.set_threshold(20_000, 10, 10)


class _DrainingServer(uvicorn.Server):
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
    _freeze_startup_objects()
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


class _DrainingWorkers(Multiprocess):
    """uvicorn's supervisor of worker processes, which lets go of its copy of the listening
    socket as soon as it is told to stop: once the workers have closed theirs, connections are
    refused, as by one process, instead of queued where no worker takes them any more and
    reset at exit. The workers drain once that is so (``_until_nobody_listens``)."""

    def handle_int(self) -> None:
        self._close_listeners()
        super().handle_int()

    def handle_term(self) -> None:
        self._close_listeners()
        super().handle_term()

    def _close_listeners(self) -> None:
        for sock in self.sockets:
            sock.close()


def serve_workers(factory: str, args: argparse.Namespace) -> None:
    """A service's ``--workers`` processes sharing its ``--host`` and ``--port``, each serving
    the app the function ``factory`` ("module:function", which calls ``drain_in_worker``)
    makes, with the service's TLS and limit options; until SIGTERM/SIGINT, drained as
    :func:`serve` drains one."""
    server_config = config(
        factory,
        args.host,
        args.port,
        tls=tls_of(args),
        limits=limits_of(args),
        factory=True,
        workers=args.workers,
        timeout_graceful_shutdown=10,
        # A worker that does not answer its supervisor within this is killed and started
        # again; uvicorn's 5 s is shorter than a worker's start-up on a loaded machine, which
        # then never finished starting.
        timeout_worker_healthcheck=60,
    )
    _DrainingWorkers(server_config, sockets=[server_config.bind_socket()]).run()


def serve(
    app: ASGIApp,
    host: str,
    port: int,
    *,
    tls: Tls | None = None,
    limits: ConnectionLimits = ConnectionLimits(),
) -> None:
    """Run ``app`` with uvicorn until SIGTERM/SIGINT (graceful: open requests finish, streams
    end after their current batch: ``draining``)."""
    server_config = config(app, host, port, tls=tls, limits=limits, timeout_graceful_shutdown=10)
    _freeze_startup_objects()
    _DrainingServer(server_config).run()
