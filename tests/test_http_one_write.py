"""``OneWriteResponse`` (``changebroker.http``'s ``RESPOND``): a whole answer in one write, the
same answer a Starlette response gives, and a connection the answer ends is closed after the
write, over plain HTTP and TLS alike."""

from __future__ import annotations

import contextlib
import gc
import socket
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from changebroker.http import FlowIdMiddleware, OneWriteResponse, Tls
from changebroker.stack.run import serve_in_thread
from tests.support.credentials import self_signed_ca
from tests.support.raw_http import until_closed, without_date_and_flow_id

TIMEOUT = 10.0


def _app() -> Starlette:
    async def one_write(request: Request) -> Response:
        return OneWriteResponse(b"hello", media_type="text/plain")

    async def plain(request: Request) -> Response:
        return Response(b"hello", media_type="text/plain")

    return Starlette(routes=[Route("/one-write", one_write), Route("/plain", plain)])


Connect = Callable[[], socket.socket]


@pytest.fixture(params=["http", "https"])
def connect(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Connect]:
    """Opens a new connection to the app, over plain HTTP or TLS."""
    tls, wrap = None, None
    if request.param == "https":
        certificates = self_signed_ca(tmp_path)
        tls = Tls(certificates.cert, certificates.key)
        trusted = ssl.create_default_context(cafile=str(certificates.ca))
        wrap = trusted.wrap_socket
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(serve_in_thread(FlowIdMiddleware(_app()), tls=tls))
        port = int(url.rsplit(":", 1)[1])

        def opened() -> socket.socket:
            conn = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
            if wrap is not None:
                conn = wrap(conn, server_hostname="127.0.0.1")
            return stack.enter_context(conn)

        yield opened


@pytest.mark.parametrize(
    "request_line, headers",
    [("HTTP/1.1", "Connection: close\r\n"), ("HTTP/1.0", "")],
    ids=["connection-close", "http-1.0"],
)
def test_an_answer_that_ends_its_connection_is_whole_and_then_the_connection_closes(
    connect: Connect, request_line: str, headers: str
) -> None:
    answers = {}
    for path in ("/one-write", "/plain"):
        conn = connect()
        conn.sendall(f"GET {path} {request_line}\r\nHost: t\r\n{headers}\r\n".encode())
        answers[path] = until_closed(conn)
    assert answers["/one-write"].endswith(b"\r\n\r\nhello")
    assert b"connection: close" in answers["/one-write"]
    one_write, plain = (without_date_and_flow_id(answers[p]) for p in ("/one-write", "/plain"))
    assert one_write == plain
    # The server goes on serving.
    conn = connect()
    conn.sendall(b"GET /one-write HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    assert until_closed(conn).endswith(b"hello")


def test_a_kept_alive_connection_goes_on_after_an_answer_in_one_write(connect: Connect) -> None:
    conn = connect()
    conn.sendall(b"GET /one-write HTTP/1.1\r\nHost: t\r\n\r\n")
    first = b""
    while not first.endswith(b"hello"):
        block = conn.recv(65536)
        assert block, f"closed after the first answer: {first!r}"
        first += block
    assert b"connection: close" not in first
    conn.sendall(b"GET /one-write HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    assert until_closed(conn).endswith(b"hello")


@pytest.mark.parametrize("path", ["/one-write", "/plain"])
def test_an_answered_request_is_freed_when_it_ends_not_by_the_cycle_collector(
    connect: Connect, path: str
) -> None:
    # A request left in a reference cycle waits for a collection, which pauses every request
    # in flight; with the collector off, such requests pile up and can be counted.
    conn = connect()
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            conn.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
            answer = b""
            while not answer.endswith(b"hello"):
                block = conn.recv(65536)
                assert block, f"closed after {answer!r}"
                answer += block
        alive = sum(isinstance(o, RequestResponseCycle) for o in gc.get_objects())
    finally:
        gc.enable()
    # The last request's task may still be ending; none before it may be left.
    assert alive <= 1
