"""Retrying: delays that grow with jitter, the base URLs tried in turn, and a request made
until it is answered."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from changebroker.client.effects import Answer, Call, Effect, Sleep
from changebroker.client.wire import Refusal

log = logging.getLogger("changebroker.client")

# Answers that say "not now" rather than "no": the request is made again after a delay, on
# the next base URL (a draining or marked-down instance answers 503).
RETRYABLE = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Backoff:
    """Delays between attempts: the ceiling starts at ``first`` seconds and grows by
    ``factor`` up to ``most``; each delay is drawn between half the ceiling and the ceiling,
    so clients that failed together do not come back together, and none comes back at once."""

    first: float = 0.1
    most: float = 30.0
    factor: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.first <= self.most or self.factor < 1:
            raise ValueError(
                f"backoff needs 0 < first <= most and factor >= 1, got {self.first},"
                f" {self.most}, {self.factor}"
            )

    def delays(self) -> Iterator[float]:
        ceiling = self.first
        while True:
            yield random.uniform(ceiling / 2, ceiling)
            ceiling = min(ceiling * self.factor, self.most)


def retry_after(headers: httpx.Headers) -> float:
    """Seconds a ``Retry-After`` header asks to wait (0 without one, or as an HTTP date)."""
    text = headers.get("retry-after", "")
    try:
        return max(0.0, float(text))
    except ValueError:
        return 0.0


def base_urls(urls: str | Sequence[str]) -> tuple[str, ...]:
    """One base URL or several, as a tuple."""
    return (urls,) if isinstance(urls, str) else tuple(urls)


class Endpoints:
    """Several base URLs of one service (instances, or one load balancer's): requests go to
    one until it fails, then to the next. Every instance names a change with the same
    sequence and shares a subscription's state, so any of them can take the next request."""

    def __init__(self, urls: Sequence[str]) -> None:
        if not urls:
            raise ValueError("give at least one base URL")
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"a base URL starts with http:// or https://: {url!r}")
        self.urls = [url.rstrip("/") for url in urls]
        self._current = 0

    def url(self, path: str) -> str:
        return self.urls[self._current] + path

    def next(self) -> None:
        self._current = (self._current + 1) % len(self.urls)


def exchange(
    make: Callable[[str], Call],
    endpoints: Endpoints,
    backoff: Backoff,
    stopping: Callable[[], bool],
) -> Generator[Effect, Any, Answer | None]:
    """Make the request ``make(base URL)`` until an answer that is not "not now" comes
    (a failed connection, a timeout, or a :data:`RETRYABLE` status: then again, after a
    delay, on the next base URL); ``None`` once ``stopping()``. ``Retry-After`` is honoured."""
    delays = backoff.delays()
    while not stopping():
        call = make(endpoints.url(""))
        answer = yield call
        if isinstance(answer, Answer) and answer.status not in RETRYABLE:
            return answer
        delay = next(delays)
        if isinstance(answer, Answer):
            delay = max(delay, retry_after(answer.headers))
            said: object = Refusal.of(answer.status, answer.body)
        else:
            said = answer
        log.warning(
            "%s %s: %s; again in %.1f s%s",
            call.method,
            call.url,
            said,
            delay,
            " on the next base URL" if len(endpoints.urls) > 1 else "",
        )
        endpoints.next()
        yield Sleep(delay)
    return None
