"""The uvicorn protocol every service serves with (``UpgradeIgnoringProtocol``): httptools'
protocol, serving an unsupported upgrade as HTTP/1.1, with limits on slow and large request
heads and bodies, one-write responses (``RESPOND``) and a drain that resets no request.

It subclasses private uvicorn classes; ``tests/test_uvicorn_private_names.py`` names every
private name it relies on, so a uvicorn that changes them fails there first.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.server import ServerState

from changebroker import logs
from changebroker.http.draining import NOBODY_LISTENS, until_nobody_listens
from changebroker.http.responses import RESPOND, header_lines

DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 60.0
DEFAULT_MAX_HEADER_BYTES = 64 * 1024
# How long a draining service keeps an idle keep-alive connection open: a request its client
# sent as the drain began is answered (with ``connection: close``) instead of reset.
DRAIN_IDLE_GRACE = 0.5
# How long a TLS close waits for the client's close_notify before it lets the client go.
TLS_CLOSE_WAIT = 0.5


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
        ``until_nobody_listens``), a connection busy with a request closes after its
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
        nobody_listens = NOBODY_LISTENS.get(self.server_state)
        if nobody_listens is None:
            # The connection's own address is the one its server listens at.
            family = self.transport.get_extra_info("socket").family
            address = self.transport.get_extra_info("sockname")
            nobody_listens = self.loop.create_task(until_nobody_listens(self.loop, family, address))
            NOBODY_LISTENS[self.server_state] = nobody_listens
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
