"""Slow and abusive clients: 200 connections sending their request one byte a second are closed
with 408 once the header timeout passes, bodies trickled past the body timeout too, oversized
heads get 431, and meanwhile the service answers /health and a well-behaved client at normal
speed."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from changebroker.auth import AuthSettings
from changebroker.http import ConnectionLimits
from changebroker.registry.app import create_app
from changebroker.stack.run import serve_in_thread
from tests.support.credentials import tokens_file

SLOW_CLIENTS = 200
HEADER_TIMEOUT = 3.0
LIMITS = ConnectionLimits(header_timeout=HEADER_TIMEOUT, max_header_bytes=8192)


@pytest.fixture(scope="module")
def registry(registry_dsn: str) -> Iterator[str]:
    with serve_in_thread(create_app(registry_dsn), LIMITS) as url:
        yield url


@pytest.fixture(scope="module")
def registry_dsn(pg_server_dsn: str) -> Iterator[str]:
    from changebroker import pg

    with pg.scratch_database(pg_server_dsn, "t_limits") as dsn:
        yield dsn


async def _trickle(
    port: int, at_once: bytes, trickled: bytes, every: float, opened: asyncio.Queue[None]
) -> tuple[bytes, float]:
    """Send ``at_once``, then ``trickled`` one byte every ``every`` seconds until the server
    answers; what it answered, and how long after opening it closed the connection.

    Reading runs beside the writing and keeps every block as it arrives: after the server's
    408 and close, the next byte written draws a reset, and an answer read only between
    writes (or dropped by a cancelled read) would be lost to it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    opened.put_nowait(None)
    writer.write(at_once)
    received: list[bytes] = []

    async def read_until_closed() -> None:
        try:
            while block := await reader.read(65536):
                received.append(block)
        except ConnectionError:
            pass

    reading = asyncio.create_task(read_until_closed())
    try:
        for byte in trickled:
            if received or reading.done():
                break
            writer.write(bytes([byte]))
            try:
                await writer.drain()
            except ConnectionError:
                break
            await asyncio.wait({reading}, timeout=every)
        await asyncio.wait_for(reading, timeout=30)
        return b"".join(received), time.monotonic() - started
    finally:
        writer.close()


def test_slow_clients_are_cut_off_while_others_are_served(registry: str) -> None:
    port = int(registry.rsplit(":", 1)[1])
    with httpx.Client(base_url=registry, timeout=10) as client:
        baseline = _latencies(client, 20)

        async def abuse() -> tuple[list[bytes], list[float], float]:
            opened: asyncio.Queue[None] = asyncio.Queue()
            started = time.monotonic()
            request = b"GET /subjects HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"y" * 100 + b"\r\n\r\n"
            slow = [
                asyncio.create_task(_trickle(port, b"", request, 1.0, opened))
                for _ in range(SLOW_CLIENTS)
            ]
            for _ in range(SLOW_CLIENTS):  # every slow connection is open before measuring
                await opened.get()
            during = await asyncio.to_thread(_latencies, client, 20)
            answers = [answer for answer, _ in await asyncio.gather(*slow)]
            return answers, during, time.monotonic() - started

        answers, during, took = asyncio.run(abuse())
    assert all(a.startswith(b"HTTP/1.1 408") for a in answers), {a[:20] for a in answers}
    # Each cut off once the header timeout passed, not held for the request's 150 seconds.
    assert took < HEADER_TIMEOUT + 10, took
    # The well-behaved client: answered at normal speed during the abuse.
    assert statistics.median(during) < max(0.25, 5 * statistics.median(baseline)), (
        baseline,
        during,
    )


def _latencies(client: httpx.Client, count: int) -> list[float]:
    took = []
    for path in ["/health", "/subjects"] * (count // 2):
        started = time.monotonic()
        assert client.get(path).status_code == 200
        took.append(time.monotonic() - started)
    return took


def test_an_oversized_request_head_is_431(registry: str) -> None:
    response = httpx.get(f"{registry}/subjects", headers={"X-Big": "z" * 10_000}, timeout=10)
    assert response.status_code == 431
    assert httpx.get(f"{registry}/health", timeout=10).status_code == 200


def test_the_registry_refuses_a_body_past_its_limit(registry_dsn: str) -> None:
    with (
        serve_in_thread(create_app(registry_dsn, max_body_bytes=10_000)) as url,
        httpx.Client(base_url=url, timeout=30) as http,
    ):
        huge = {"type": "object", "description": "d" * 20_000}
        body = {"serialization": "json", "schemaDefinition": huge}
        refused = http.post("/subjects/huge/versions", json=body)
        assert refused.status_code == 413, refused.text
        assert refused.json()["errorCode"] == 41301
        assert http.get("/subjects/huge/versions").status_code == 404
        small = {"serialization": "json", "schemaDefinition": {"type": "object"}}
        assert http.post("/subjects/huge/versions", json=small).status_code == 200


BODY_TIMEOUT = 2.0


@pytest.fixture(scope="module")
def guarded_registry(
    registry_dsn: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """The registry with authentication on and a short body timeout; its URL and a token that
    may write."""
    path = tokens_file(
        tmp_path_factory.mktemp("auth") / "tokens.json",
        {"writer": ("schemas", ["registry.read", "registry.write"])},
    )
    authenticator = AuthSettings(mode="tokens", tokens_file=path).authenticator()
    limits = ConnectionLimits(body_timeout=BODY_TIMEOUT)
    with serve_in_thread(create_app(registry_dsn, authenticator=authenticator), limits) as url:
        yield url, "writer"


def _registration_head(subject: str, token: str | None) -> bytes:
    """A registration's head and its body's first byte, of the 1000 it says will come."""
    credentials = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"POST /subjects/{subject}/versions HTTP/1.1\r\nHost: x\r\n{credentials}"
        "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    ).encode()


def test_a_body_sent_byte_by_byte_is_cut_off_at_the_body_timeout(
    guarded_registry: tuple[str, str], unique_name: Callable[[str], str]
) -> None:
    """Authenticated or not, a client trickling its body no longer holds a connection (and the
    handler waiting for the body) indefinitely; meanwhile others are served."""
    url, token = guarded_registry
    port = int(url.rsplit(":", 1)[1])
    subject = unique_name("trickled")

    async def abuse() -> list[tuple[bytes, float]]:
        opened: asyncio.Queue[None] = asyncio.Queue()
        body = b" " * 999  # a byte every half second

        def trickle(token: str | None) -> asyncio.Task[tuple[bytes, float]]:
            head = _registration_head(subject, token)
            return asyncio.create_task(_trickle(port, head, body, 0.5, opened))

        slow = [trickle(token) for _ in range(10)]
        refused = trickle(None)
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            for _ in range(5):
                assert (await client.get("/health")).status_code == 200
                await asyncio.sleep(0.2)
        return await asyncio.gather(*slow, refused)

    *authenticated, (unauthenticated, closed) = asyncio.run(abuse())
    for answer, took in authenticated:
        assert answer.startswith(b"HTTP/1.1 408"), answer[:40]
        assert BODY_TIMEOUT <= took < BODY_TIMEOUT + 5, took
    # Refused at once, without the body; its connection no longer waits for it either.
    assert unauthenticated.startswith(b"HTTP/1.1 401"), unauthenticated[:40]
    assert closed < BODY_TIMEOUT + 5, closed
    with httpx.Client(base_url=url, timeout=10) as client:
        listed = client.get("/subjects", headers={"authorization": f"Bearer {token}"})
        assert subject not in listed.json()["name"]


def test_a_body_that_arrives_within_the_timeout_is_served(
    guarded_registry: tuple[str, str], unique_name: Callable[[str], str]
) -> None:
    url, token = guarded_registry
    body = b'{"serialization": "json", "schemaDefinition": {"type": "object"}}'

    def slowly() -> Iterator[bytes]:
        for start in range(0, len(body), 20):
            time.sleep(BODY_TIMEOUT / 8)
            yield body[start : start + 20]

    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    answer = httpx.post(
        f"{url}/subjects/{unique_name('steady')}/versions",
        content=slowly(),
        headers={**headers, "content-length": str(len(body))},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
