"""The bridge's reads of ``GET /changes`` (``changes_client.py``) against a real uvicorn: one
keep-alive connection, and a fresh one whenever a read was cut short or the server closed."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from changebroker import auth, http
from changebroker.bridge.changes_client import Answer, ChangesClient, ChangesUnreadable
from changebroker.changeserver import changes
from changebroker.stack.processes import free_port
from changebroker.stack.run import serve_in_thread
from tests.support.credentials import self_signed_ca


class Server:
    """``/changes`` answers by its ``since``: ``chunked``, ``close`` (Connection: close) and
    ``hold`` (until released) besides a plain JSON echo of the request."""

    def __init__(self) -> None:
        self.clients: list[tuple[str, int]] = []  # (host, port) of each request's connection
        self.release = threading.Event()

    async def changes(self, request: Request) -> Response:
        assert request.client is not None
        self.clients.append((request.client.host, request.client.port))
        since = request.query_params["since"]
        echo = {
            "since": since,
            "tables": request.query_params.getlist("table"),
            "authorization": request.headers.get("authorization"),
            "accept": request.headers.get("accept"),
        }
        if since == "chunked":

            async def pieces() -> AsyncIterator[bytes]:
                for n in range(1000):
                    yield b"%d," % n

            return StreamingResponse(pieces())
        if since == "close":
            return JSONResponse(echo, headers={"Connection": "close"})
        if since == "hold":
            await asyncio.to_thread(self.release.wait, 30)
        if since == "refused":
            return JSONResponse({"code": "SNAPSHOT_TOO_OLD"}, status_code=400)
        return JSONResponse(echo)


@pytest.fixture
def server() -> Iterator[tuple[Server, str]]:
    served = Server()
    app = Starlette(routes=[Route("/changes", served.changes)])
    with serve_in_thread(app) as url:
        yield served, url
        served.release.set()


def read(url: str, *reads: list[tuple[str, str]]) -> list[Answer]:
    async def run() -> list[Answer]:
        client = ChangesClient(url, headers={}, ca_file=None, timeout=10)
        try:
            return [await client.get(params) for params in reads]
        finally:
            await client.aclose()

    return asyncio.run(run())


def test_reads_share_one_connection_and_send_every_parameter(server: tuple[Server, str]) -> None:
    served, url = server
    answers = read(
        url, [("table", "public.a"), ("table", "public.b"), ("since", "1")], [("since", "2")]
    )
    assert [a.status for a in answers] == [200, 200]
    assert b'"tables":["public.a","public.b"]' in answers[0].body
    assert b'"since":"2"' in answers[1].body
    assert served.clients[0] == served.clients[1]


def test_the_compact_form_is_asked_for_first_and_a_json_answer_is_read_as_json(
    server: tuple[Server, str],
) -> None:
    """A changeserver without the compact form (an older one of a fleet) answers JSON."""
    _, url = server
    (answer,) = read(url, [("since", "1")])
    assert answer.content_type == "application/json"
    accept = answer.changes()["accept"]
    assert [name for _, name in http.accepted(accept)] == [changes.COMPACT, "application/json"]


def test_a_chunked_answer_is_read_whole(server: tuple[Server, str]) -> None:
    _, url = server
    (answer,) = read(url, [("since", "chunked")])
    assert answer.body == b"".join(b"%d," % n for n in range(1000))


def test_an_error_answer_is_returned_with_its_body(server: tuple[Server, str]) -> None:
    _, url = server
    (answer,) = read(url, [("since", "refused")])
    assert answer.status == 400 and b"SNAPSHOT_TOO_OLD" in answer.body


def test_after_connection_close_the_next_read_opens_another(server: tuple[Server, str]) -> None:
    served, url = server
    answers = read(url, [("since", "close")], [("since", "after")])
    assert b'"since":"after"' in answers[1].body
    assert served.clients[0] != served.clients[1]


def test_a_cancelled_read_never_hands_its_answer_to_the_next(server: tuple[Server, str]) -> None:
    """The bridge cancels a read ahead it no longer wants (an operator moved the read back):
    its answer, arriving later, must not be taken for the next read's."""
    served, url = server

    async def run() -> Answer:
        client = ChangesClient(url, headers={}, ca_file=None, timeout=10)
        try:
            held = asyncio.ensure_future(client.get([("since", "hold")]))
            async with asyncio.timeout(10):
                while not served.clients:  # until the held request reaches the server
                    await asyncio.sleep(0.01)
            held.cancel()
            served.release.set()
            with pytest.raises(asyncio.CancelledError):
                await held
            return await client.get([("since", "next")])
        finally:
            await client.aclose()

    answer = asyncio.run(run())
    assert b'"since":"next"' in answer.body
    assert served.clients[0] != served.clients[1]


def test_a_read_past_its_timeout_fails_and_the_next_succeeds(server: tuple[Server, str]) -> None:
    served, url = server

    async def run() -> Answer:
        client = ChangesClient(url, headers={}, ca_file=None, timeout=0.2)
        try:
            with pytest.raises(TimeoutError):
                await client.get([("since", "hold")])
            served.release.set()
            return await client.get([("since", "next")])
        finally:
            await client.aclose()

    assert b'"since":"next"' in asyncio.run(run()).body


def test_nothing_listening_says_where_it_tried() -> None:
    port = free_port()
    with pytest.raises(ChangesUnreadable, match=f"127.0.0.1:{port}"):
        read(f"http://127.0.0.1:{port}", [("since", "1")])


def test_https_with_the_stacks_ca_and_the_bearer_token(tmp_path: Path) -> None:
    certificates = self_signed_ca(tmp_path)
    served = Server()
    app = Starlette(routes=[Route("/changes", served.changes)])
    with serve_in_thread(app, tls=http.Tls(certificates.cert, certificates.key)) as url:

        async def run() -> Answer:
            client = ChangesClient(
                url,
                headers=auth.client_headers("t-1"),
                ca_file=certificates.ca,
                timeout=10,
            )
            try:
                return await client.get([("since", "1")])
            finally:
                await client.aclose()

        answer = asyncio.run(run())
    assert url.startswith("https://")
    assert b'"authorization":"Bearer t-1"' in answer.body


def test_a_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(ValueError, match="http:// or https://"):
        ChangesClient("ftp://127.0.0.1:1", headers={}, ca_file=None, timeout=1)


def test_a_connection_the_server_closed_during_a_pause_is_replaced_unseen() -> None:
    """The event loop blocked past the server's keep-alive timeout (as a long garbage
    collection or a stopped process blocks it): the next read goes out before the loop has
    seen the close, reaches no one, and is sent again on a new connection."""
    served = Server()
    app = Starlette(routes=[Route("/changes", served.changes)])
    with serve_in_thread(app, limits=http.ConnectionLimits(idle_timeout=1)) as url:

        async def run() -> list[Answer]:
            client = ChangesClient(url, headers={}, ca_file=None, timeout=10)
            try:
                first = await client.get([("since", "1")])
                time.sleep(2)  # the pause under test: the loop hears nothing meanwhile
                return [first, await client.get([("since", "2")])]
            finally:
                await client.aclose()

        answers = asyncio.run(run())
    assert [a.status for a in answers] == [200, 200]
    assert b'"since":"2"' in answers[1].body
    assert served.clients[0] != served.clients[-1]
