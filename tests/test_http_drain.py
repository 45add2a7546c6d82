"""A draining service answers a request that reached an idle keep-alive connection as the drain
began (with ``connection: close``), instead of resetting it, and still closes the connections
that stay idle, so the drain ends: over TLS too, where an idle client does not answer the
server's close_notify."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from changebroker.http import ConnectionLimits, Tls
from changebroker.stack.processes import wait_until
from changebroker.stack.run import serve_in_thread
from tests.support.credentials import self_signed_ca

TIMEOUT = 10.0


def _app(entered: threading.Event, release: threading.Event) -> Starlette:
    async def ok(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    async def slow(request: Request) -> PlainTextResponse:
        entered.set()
        await asyncio.get_running_loop().run_in_executor(None, release.wait, TIMEOUT * 3)
        return PlainTextResponse("slow")

    return Starlette(routes=[Route("/ok", ok), Route("/slow", slow)])


def _get(conn: socket.socket, path: str) -> None:
    conn.sendall(f"GET {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode())


def _read_response(conn: socket.socket) -> tuple[bytes, bytes]:
    """(head, body) of one response with a content-length."""
    data = b""
    while b"\r\n\r\n" not in data:
        block = conn.recv(65536)
        assert block, f"the connection closed before a whole response head: {data!r}"
        data += block
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.lower().split(b"\r\n")
        if line.startswith(b"content-length:")
    )
    while len(body) < length:
        block = conn.recv(65536)
        assert block, "the connection closed inside a response body"
        body += block
    return head, body


def _refuses_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    except ConnectionResetError:
        # Queued in the listener's backlog as it closed: not yet a refusal, ask again.
        return False
    return False


def test_a_request_on_an_idle_connection_as_the_drain_begins_is_answered() -> None:
    entered, release = threading.Event(), threading.Event()
    with contextlib.ExitStack() as sockets, contextlib.ExitStack() as serving:
        url = serving.enter_context(serve_in_thread(_app(entered, release)))
        port = int(url.rsplit(":", 1)[1])
        idle, quiet, busy = (
            sockets.enter_context(socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT))
            for _ in range(3)
        )
        for conn in (idle, quiet):
            _get(conn, "/ok")
            assert _read_response(conn)[1] == b"ok"
        # A request in progress holds the drain open while the idle connections are watched.
        _get(busy, "/slow")
        wait_until(entered.is_set, timeout=TIMEOUT, what="the slow request to start")

        stopping = threading.Thread(target=serving.close)
        stopping.start()
        try:
            # The listening socket closes in the same step as the drain's start.
            wait_until(lambda: _refuses_connections(port), timeout=TIMEOUT, what="the drain")
            _get(idle, "/ok")
            head, body = _read_response(idle)
            assert head.startswith(b"HTTP/1.1 200"), head
            assert b"connection: close" in head.lower(), head
            assert body == b"ok"
            assert idle.recv(65536) == b"", "closed after the answer"
            # A connection that stays idle is closed after the grace, not held to the end.
            assert quiet.recv(65536) == b""
            assert stopping.is_alive(), "the drain waits for the slow request"
        finally:
            release.set()
            stopping.join(timeout=TIMEOUT * 3)
        assert _read_response(busy)[1] == b"slow"
        assert not stopping.is_alive()


@pytest.mark.parametrize("client", ["idle", "refused"])
def test_a_tls_client_that_does_not_read_does_not_hold_the_drain(
    tmp_path: Path, client: str
) -> None:
    """A client that is not reading never answers the close_notify a TLS close sends:
    waiting for its answer held the drain to the graceful timeout (here: none, so until
    the TLS layer's own 30 s). One idle after its answer; one answered 408, its request's
    head too slow, and gone quiet."""
    certificates = self_signed_ca(tmp_path)
    trusted = ssl.create_default_context(cafile=str(certificates.ca))
    entered, release = threading.Event(), threading.Event()
    with contextlib.ExitStack() as sockets, contextlib.ExitStack() as serving:
        tls = Tls(certificates.cert, certificates.key)
        limits = ConnectionLimits(header_timeout=0.5)
        url = serving.enter_context(serve_in_thread(_app(entered, release), limits=limits, tls=tls))
        port = int(url.rsplit(":", 1)[1])
        quiet = sockets.enter_context(
            trusted.wrap_socket(
                socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT),
                server_hostname="127.0.0.1",
            )
        )
        if client == "idle":
            _get(quiet, "/ok")
            assert _read_response(quiet)[1] == b"ok"
        else:
            quiet.sendall(b"GET /ok HTTP/1.1\r\n")
            head, _ = _read_response(quiet)
            assert head.startswith(b"HTTP/1.1 408"), head

        stopping = threading.Thread(target=serving.close)
        stopping.start()
        stopping.join(timeout=TIMEOUT)
        assert not stopping.is_alive(), f"the drain waits on the {client} TLS connection"
        assert _refuses_connections(port)
