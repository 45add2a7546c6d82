"""ASGI plumbing every HTTP service shares: X-Flow-Id, access lines, request durations,
serving, Accept.

Error bodies are not here on purpose: each API has its own error format
(transicator, Nakadi Problem, OpenSchema), and each service owns its own.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from types import FrameType
from typing import Any

import httptools
import uvicorn
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from changebroker import logs, metrics

FLOW_ID_HEADER = "x-flow-id"
access_log = logging.getLogger("changebroker.access")

# Set once the process is asked to stop (SIGTERM, SIGINT): endless responses (event streams)
# end after the batch they are on, so they end whole within the graceful shutdown's time.
draining = threading.Event()

# scope["extensions"][RESPOND]: ``respond(status, headers, body) -> bool`` writes a whole
# response at once, from any callback on the server's event loop, without the request's own
# task: what lets one commit answer thousands of long polls in one pass (see
# ``UpgradeIgnoringProtocol.respond``). ``headers`` carry content-length and no connection.
RESPOND = "changebroker.respond"
Respond = Callable[[int, list[tuple[bytes, bytes]], bytes], bool]


class OneWriteResponse(Response):
    """A ``Response`` written in one write (status line, headers and body) where the server
    offers ``RESPOND``: uvicorn's send writes the head and the body apart, two system calls,
    which is most of a small answer's cost. Elsewhere, sent as any response is."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        respond: Respond | None = (scope.get("extensions") or {}).get(RESPOND)
        if respond is None or not respond(self.status_code, self.raw_headers, bytes(self.body)):
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
        current = incoming or uuid.uuid4().hex
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

            def respond_with_flow_id(
                code: int, headers: list[tuple[bytes, bytes]], body: bytes
            ) -> bool:
                nonlocal status
                if not respond(code, [*headers, (b"x-flow-id", current.encode("latin-1"))], body):
                    return False
                status = code
                return True

            extensions[RESPOND] = respond_with_flow_id

        try:
            await self.app(scope, receive, send_with_flow_id)
        finally:
            seconds = time.perf_counter() - started
            metrics.observe_request(scope, status, seconds)
            if access_log.isEnabledFor(logging.INFO):
                fields = logs.fields(
                    method=scope["method"],
                    path=scope["path"],
                    status=status,
                    ms=round(seconds * 1000, 2),
                )
                # makeRecord, not info(): the caller's file and line, which no line shows,
                # cost a stack walk per request (a tenth of a woken long poll's CPU).
                record = access_log.makeRecord(
                    access_log.name, logging.INFO, __file__, 0, "request", (), None, extra=fields
                )
                access_log.handle(record)
            logs.flow_id.reset(token)


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

    def on_headers_complete(self) -> None:
        # CONNECT is an upgrade to llhttp whatever its headers: left to uvicorn.
        self._reparsing = self.parser.should_upgrade() and self.parser.get_method() != b"CONNECT"
        if not self._reparsing:
            super().on_headers_complete()
            cycle = self.cycle
            if cycle is not None and cycle.scope is self.scope:
                scope: dict[str, Any] = self.scope  # type: ignore[assignment]
                scope.setdefault("extensions", {})[RESPOND] = functools.partial(self.respond, cycle)

    def respond(
        self,
        cycle: RequestResponseCycle,
        status: int,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> bool:
        """What uvicorn's ``send`` writes for a start and a final body, in one write and
        synchronously; False (nothing written) when the client left or a response began."""
        if cycle.disconnected or cycle.response_started or self.transport.is_closing():
            return False
        cycle.response_started = True
        content = [STATUS_LINE[status]]
        for name, value in (*cycle.default_headers, *headers):
            content += (name, b": ", value, b"\r\n")
        if not cycle.keep_alive:
            content.append(b"connection: close\r\n")
        content.append(b"\r\n")
        if cycle.scope["method"] != "HEAD":
            content.append(body)
        self.transport.write(b"".join(content))
        cycle.response_complete = True
        cycle.message_event.set()
        if not cycle.keep_alive:
            self.transport.close()
        cycle.on_response()
        return True

    def on_body(self, body: bytes) -> None:
        if not self._reparsing:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._reparsing:
            super().on_message_complete()

    def data_received(self, data: bytes) -> None:
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


def config(app: ASGIApp, host: str, port: int, **options: Any) -> uvicorn.Config:
    """uvicorn's settings for every service (``options``: lifespan, graceful timeout, ...)."""
    return uvicorn.Config(
        FlowIdMiddleware(app),
        host=host,
        port=port,
        http=UpgradeIgnoringProtocol,
        ws="none",  # no service serves WebSockets: their upgrades are ignored too
        log_config=None,
        access_log=False,
        **options,
    )


class _DrainingServer(uvicorn.Server):
    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        draining.set()
        super().handle_exit(sig, frame)


def serve(app: ASGIApp, host: str, port: int) -> None:
    """Run ``app`` with uvicorn until SIGTERM/SIGINT (graceful: open requests finish, streams
    end after their current batch: ``draining``)."""
    _DrainingServer(config(app, host, port, timeout_graceful_shutdown=10)).run()
