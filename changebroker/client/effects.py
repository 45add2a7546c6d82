"""The I/O the client's logic asks for, as values: one logic for the blocking and the asyncio
flavours, each of which only carries the requests out (``sync.py``, ``aio.py``).

A program is a generator that yields an effect and is sent its result: an :class:`Answer`
or a :class:`Failure` for :class:`Call` and :class:`Open`, the next piece of the open body
(``b""`` at its end) or a :class:`Failure` for :class:`Read`, ``None`` for the rest.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass(frozen=True, slots=True)
class Call:
    """An HTTP exchange whose answer is read whole."""

    method: str
    url: str
    params: tuple[tuple[str, str], ...] = ()
    headers: dict[str, str] = field(default_factory=dict)
    json: Any = None
    timeout: httpx.Timeout | None = None  # None: the client's


@dataclass(frozen=True, slots=True)
class Open(Call):
    """An HTTP exchange whose body is read piece by piece (:class:`Read`) while it arrives;
    an answer other than 200 is read whole and the exchange is over. One at a time."""


@dataclass(frozen=True, slots=True)
class Read:
    """The next piece of the open body."""


@dataclass(frozen=True, slots=True)
class Close:
    """The open exchange is no longer wanted."""


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class Emit:
    """Hand ``item`` to the consumer; the program goes on once the consumer is done with it."""

    item: Any


@dataclass(frozen=True, slots=True)
class Blocking:
    """A blocking call (a position store's file I/O): made in a thread under asyncio."""

    function: Callable[[], Any]


Effect = Call | Read | Close | Sleep | Emit | Blocking
Program = Generator[Effect, Any, Any]


def returning(program: Program, into: list[Any]) -> Program:
    """``program``, its return value appended to ``into`` (a driver hands out only what a
    program emits)."""
    into.append((yield from program))


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: httpx.Headers
    body: bytes  # empty for an open 200


@dataclass(frozen=True, slots=True)
class Failure:
    """No answer: the connection failed, timed out, or broke part way."""

    error: httpx.RequestError

    def __str__(self) -> str:
        return (
            f"{type(self.error).__name__}: {self.error}"
            if str(self.error)
            else (type(self.error).__name__)
        )


def request(client: httpx.Client | httpx.AsyncClient, call: Call) -> httpx.Request:
    return client.build_request(
        call.method,
        call.url,
        params=call.params,
        headers=call.headers,
        json=call.json,
        timeout=call.timeout if call.timeout is not None else client.timeout,
    )


# A connection left idle this long is not used again: the server closes idle keep-alive
# connections (our services after 5 s, --idle-timeout), and one closing under a request
# fails it.
KEEPALIVE_EXPIRY = 3.0

Verify = bool | str | ssl.SSLContext  # httpx's: the system's CAs, a CA file, or a context


def client_options(
    token: str | None, verify: Verify, headers: Mapping[str, str] | None, timeout: float
) -> dict[str, Any]:
    """An httpx client's options: the bearer token a service that checks credentials wants,
    the trust of its TLS certificate, more headers, and the connect and send timeout."""
    sent = {"Authorization": f"Bearer {token}"} if token else {}
    return {
        "headers": {**sent, **(headers or {})},
        "verify": verify,
        "timeout": httpx.Timeout(timeout),
        "limits": httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY),
    }
