"""Long polling: a ``/changes`` request with nothing to return waits for its selectors'
news, as transicator's change tracker makes it wait.

The request registers one waiter under each of its selectors; the replication thread, after
each durable batch, wakes the waiters of the selectors it wrote through
``loop.call_soon_threadsafe``. No polling loop, and an idle waiter costs a future, a small
object and a few set entries. A woken waiter whose answer is ready writes it to its
connection there and then (``http.RESPOND``): one commit's answer is rendered once per query
and written to every waiting connection in one pass; only then are the requests' tasks woken.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Protocol

from changebroker import http
from changebroker.changeserver import metrics
from changebroker.changeserver.pgoutput import NO_SELECTOR, RESET_EVERY, RESET_UNSELECTED
from changebroker.changeserver.query import ANY_SELECTOR, Answer, Query


class Waiter(Protocol):
    """A blocked request, woken once on the event loop when its selectors have news."""

    def answer(self) -> None:
        """Write the answer to the connection now, if it is final."""

    def release(self) -> None:
        """Let the request's task go on (after every waiter woken with it has answered)."""


class Waiters:
    """Long-poll waiters keyed by selector, woken from the replication thread."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.by_selector: dict[str, set[Waiter]] = {}
        self.wakes = 0  # how many batches have woken waiters so far
        self.waiting = 0  # long polls registered now (one may wait on several selectors)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def notify_threadsafe(self, selectors: set[str]) -> None:
        """Called by the replication thread once ``selectors`` have new durable changes."""
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._wake, selectors)

    def _wake(self, selectors: set[str]) -> None:
        self.wakes += 1
        # A table event: every poll that may hold the table's rows learns it is too old.
        if RESET_EVERY in selectors:
            selectors = set(self.by_selector)
        elif RESET_UNSELECTED in selectors:
            selectors = {*selectors, NO_SELECTOR}
        # A set: a long poll waiting on several of these selectors is woken (and counted) once.
        woken: set[Waiter] = set()
        for selector in (*selectors, ANY_SELECTOR):
            woken |= self.by_selector.pop(selector, set())
        # The pass writes every answer at once (``http.Respond``); a full collection in the
        # middle of it, which walks every object thousands of open connections hold (0.2 s
        # with 5,000), would hold back the answers not yet written: it runs after them.
        collecting = gc.isenabled()
        gc.disable()
        try:
            # Every answer first: the last one written waits for the writes alone, not also
            # for each request's wake-up (a task scheduled per waiter).
            for waiter in woken:
                waiter.answer()
            for waiter in woken:
                waiter.release()
        finally:
            if collecting:
                gc.enable()
        metrics.longpoll_wakeups.inc(len(woken))

    def wake_all(self) -> None:
        """Every waiter answers now (the server is stopping)."""
        self._wake(set(self.by_selector))

    def register(self, selectors: list[str], waiter: Waiter) -> None:
        for selector in selectors:
            self.by_selector.setdefault(selector, set()).add(waiter)
        self.waiting += 1

    def unregister(self, selectors: list[str], waiter: Waiter) -> None:
        self.waiting -= 1
        for selector in selectors:
            waiting = self.by_selector.get(selector)
            if waiting is not None:
                waiting.discard(waiter)
                if not waiting:
                    del self.by_selector[selector]

    def by_selector_counts(self, limit: int) -> dict[str, int]:
        """The ``limit`` selectors most long polls wait on now, with how many wait."""
        counts = sorted(((len(f), s) for s, f in self.by_selector.items()), reverse=True)
        return {selector: count for count, selector in counts[:limit]}


class Answers(Protocol):
    """What a long poll asks of the endpoint it waits at (``api.ChangesEndpoint``)."""

    @property
    def version(self) -> int:
        """The change log's version the latest answer read."""

    def log_version(self) -> int:
        """The change log's version now."""

    def answer(self, query: Query, *, checked: bool = False) -> Answer:
        """The answer to ``query`` now (``checked``: the log's version was read in this pass)."""

    def answer_on_wake(self, query: Query, once: bool, respond: http.Respond) -> bool:
        """On a wake: write the answer now if it is final; False leaves it to the request."""

    def marked_down(self) -> bool:
        """Whether the server is marked down: waiting polls answer with what there is."""


async def wait(
    answers: Answers, waiters: Waiters, query: Query, respond: http.Respond | None
) -> Answer | None:
    """The answer to send: at once when it holds changes or ``query`` does not block, else
    once there is news for it (or its ``block`` is over); None when a wake already wrote it
    through ``respond``."""
    answer = found, behind, _, _, _ = answers.answer(query)
    if found or query.block <= 0:
        return answer
    version = answers.version  # the change log's, as this answer read it
    # limit <= 0 never finds changes: like transicator, it waits for the next change on
    # its selectors (or block's end), once, and answers the bounds then.
    once = query.limit <= 0
    deadline = time.monotonic() + query.block
    loop = asyncio.get_running_loop()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or http.draining.is_set() or answers.marked_down():
            return answer
        # Behind ``since``: every durable batch may be the one that catches up, whatever
        # its selectors; once caught up, only the query's own selectors' news matters.
        selectors = query.selectors
        if behind and ANY_SELECTOR not in selectors:
            selectors = [*selectors, ANY_SELECTOR]
        waiter = LongPoll(answers, query, once, respond, loop.create_future())
        future = waiter.future
        waiters.register(selectors, waiter)
        try:
            # Ask again once registered: a batch made durable before is not missed.
            if once and not behind and answers.log_version() != version:
                return answers.answer(query)
            answer = found, now_behind, _, _, _ = answers.answer(query)
            if found or (once and behind and not now_behind):
                return answer
            if behind and not now_behind:
                behind = False
                continue  # caught up: wait on the query's own selectors
            # A timer on the future itself: cheaper than wait_for, per waiter.
            timer = loop.call_later(remaining, _expire, future)
            try:
                if await future:
                    return None
            finally:
                timer.cancel()
        finally:
            waiters.unregister(selectors, waiter)
        answer = found, now_behind, _, _, _ = answers.answer(query)
        if found or (once and not now_behind):
            return answer
        behind = now_behind


class LongPoll:
    """A blocked ``/changes`` request as its selectors' waiter: its future is True once a
    wake has written its answer, False when the request's task must answer itself."""

    __slots__ = ("answers", "future", "once", "query", "respond", "written")

    def __init__(
        self,
        answers: Answers,
        query: Query,
        once: bool,
        respond: http.Respond | None,
        future: asyncio.Future[bool],
    ) -> None:
        self.answers = answers
        self.query = query
        self.once = once
        self.respond = respond
        self.future = future
        self.written = False

    def answer(self) -> None:
        if self.respond is not None and not self.future.done():
            self.written = self.answers.answer_on_wake(self.query, self.once, self.respond)

    def release(self) -> None:
        if not self.future.done():
            self.future.set_result(self.written)


def _expire(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)
