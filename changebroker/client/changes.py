"""The change feed's logic, shared by :class:`~changebroker.client.sync.ChangeFeed` and
:class:`~changebroker.client.aio.AsyncChangeFeed`: long polls of ``/changes``
(docs/specs/changeserver-api.yaml), the position kept, the snapshot taken when the change
log no longer holds what comes after it.

The position moves once the consumer is done with what came before it: after the last
change of an answer has been handed out and the next item is asked for (or the feed is
left without an exception), and never before. A consumer killed at any moment gets again,
when it starts over, at most the answer it was working on: applying changes by key, it ends
with exactly the table's rows.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from google.protobuf.message import DecodeError

from changebroker.client import snapshots
from changebroker.client.backoff import Backoff, Endpoints, base_urls, exchange
from changebroker.client.effects import Blocking, Call, Effect, Emit, Verify, client_options
from changebroker.client.errors import ChangeFeedError, PositionLost, PositionMismatch
from changebroker.client.positions import MemoryPositionStore, Position, PositionStore
from changebroker.client.wire import (
    JSON,
    PROTOBUF,
    Page,
    Refusal,
    later,
    page_from_json,
    page_from_protobuf,
)

Start = Literal["beginning", "snapshot", "now"]
OnTooOld = Literal["snapshot", "raise"]
Format = Literal["json", "protobuf"]

_SELECTOR = re.compile(r"^[0-9a-z_-]+$")  # what the changeserver accepts
MAX_LIMIT = 100_000
BEGINNING = "0.0.0"


@dataclass(frozen=True)
class FeedSettings:
    urls: tuple[str, ...]
    selectors: tuple[str, ...]  # sorted, each once; none: the rows without a selector
    start: Start = "beginning"
    on_too_old: OnTooOld = "snapshot"
    format: Format = "json"
    limit: int = 1000
    block: int = 30
    snapshot_wait: float = 600.0
    backoff: Backoff = field(default_factory=Backoff)
    timeout: float = 10.0  # connecting and sending; reading waits ``block`` longer
    read_grace: float = 15.0  # how much later than ``block`` an answer may come

    def __post_init__(self) -> None:
        for selector in self.selectors:
            if not _SELECTOR.match(selector):
                raise ValueError(f"invalid selector {selector!r}: use [0-9a-z_-]")
        if self.start not in ("beginning", "snapshot", "now"):
            raise ValueError(f"start is beginning, snapshot or now, not {self.start!r}")
        if self.on_too_old not in ("snapshot", "raise"):
            raise ValueError(f"on_too_old is snapshot or raise, not {self.on_too_old!r}")
        if self.format not in ("json", "protobuf"):
            raise ValueError(f"format is json or protobuf, not {self.format!r}")
        if not 1 <= self.limit <= MAX_LIMIT:
            raise ValueError(f"limit is 1 to {MAX_LIMIT}, not {self.limit}")
        if self.block < 1:
            # Each poll waits this long for a change: 0 would ask again and again at once.
            raise ValueError(f"block is 1 or more seconds, not {self.block}")


@dataclass
class FeedState:
    since: str | None = None  # where the next poll reads from; None before the start
    snapshot_reason: str | None = None  # a snapshot to take before the next poll, and why
    position: Position | None = None  # the stored one
    pending: Position | None = None  # to store once the last item handed out is handled
    stopping: bool = False


class FeedRun:
    """What one feed's logic works with."""

    def __init__(self, settings: FeedSettings, store: PositionStore | None) -> None:
        self.settings = settings
        self.store: PositionStore = store if store is not None else MemoryPositionStore()
        self.state = FeedState()
        self.endpoints = Endpoints(settings.urls)

    def stopping(self) -> bool:
        return self.state.stopping

    def selector_params(self) -> tuple[tuple[str, str], ...]:
        return tuple(("selector", selector) for selector in self.settings.selectors)

    def accept(self) -> dict[str, str]:
        return {"Accept": PROTOBUF if self.settings.format == "protobuf" else JSON}

    def store_pending(self) -> None:
        """Store the position of what has been handed out (the consumer is done with it)."""
        if self.state.pending is not None:
            self.store.save(self.state.pending)
            self.state.position, self.state.pending = self.state.pending, None


class FeedBase:
    """What both flavours of the change feed take and share.

    ``urls``: the changeserver's base URL (with its ``--prefix``), or several: instances of
    a fleet, or one load balancer's; requests go to one until it fails, then to the next.
    ``selectors``: the ``selector`` (``scope``) values to read, OR-ed; none reads the rows
    without a selector. ``store``: where the position is kept between runs (default: in
    memory); :class:`~changebroker.client.positions.FilePositionStore` keeps it in a file.

    ``start``, where a feed without a stored position starts: ``"beginning"`` (every change
    the change log still holds), ``"snapshot"`` (the newest replay snapshot of the
    selectors, then the changes after it), ``"now"`` (the changes after the newest one when
    the feed is opened). ``on_too_old``, when the change log no longer holds the changes
    after the position (``SNAPSHOT_TOO_OLD``: retention, a TRUNCATE): ``"snapshot"`` takes
    one and goes on from it, ``"raise"`` raises
    :class:`~changebroker.client.errors.PositionLost`. ``snapshot_wait``: how long to wait
    for a snapshot that can be handed off (published, and not older than the change log)
    before :class:`~changebroker.client.errors.SnapshotUnavailable`.

    ``format``: ``"json"`` or ``"protobuf"`` (transicator's; snapshots are always read in
    it). ``limit``: changes per answer (at most 100000). ``block``: seconds a poll waits for
    a change; an answer may take ``block`` plus 15 s before it counts as lost. ``backoff``:
    the delays between attempts after a failure or a "not now" answer (5xx, 429).
    ``timeout``: connecting and sending, in seconds. ``token``: a bearer token for a server
    that checks credentials; ``verify``: ``True`` (the system's CAs), a CA file, or an
    ``ssl.SSLContext``; ``headers``: more headers for every request.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        selectors: Sequence[str] = (),
        *,
        store: PositionStore | None = None,
        start: Start = "beginning",
        on_too_old: OnTooOld = "snapshot",
        format: Format = "json",
        limit: int = 1000,
        block: int = 30,
        snapshot_wait: float = 600.0,
        backoff: Backoff | None = None,
        timeout: float = 10.0,
        token: str | None = None,
        verify: Verify = True,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        feed_settings = FeedSettings(
            base_urls(urls),
            tuple(sorted(set(selectors))),
            start=start,
            on_too_old=on_too_old,
            format=format,
            limit=limit,
            block=block,
            snapshot_wait=snapshot_wait,
            backoff=backoff or Backoff(),
            timeout=timeout,
        )
        self._run = FeedRun(feed_settings, store)
        self._client_options = client_options(token, verify, headers, timeout)
        self._begun = False

    @property
    def position(self) -> str | None:
        """The sequence last stored: every change up to it has been handled."""
        position = self._run.state.position
        return None if position is None else position.sequence

    def stop(self) -> None:
        self._run.state.stopping = True


def begin(run: FeedRun) -> Generator[Effect, Any, None]:
    """Where the feed starts: its stored position, or else what ``start`` says."""
    settings, state = run.settings, run.state
    stored: Position | None = yield Blocking(run.store.load)
    if stored is not None and stored.selectors != settings.selectors:
        raise PositionMismatch(
            f"the position store holds a position for selectors {list(stored.selectors)},"
            f" this feed reads {list(settings.selectors)}: a position says nothing about"
            " other selectors' changes before it; give this feed a store of its own"
        )
    state.position = stored
    if stored is not None:
        state.since = stored.sequence
    elif settings.start == "snapshot":
        state.snapshot_reason = "first start"
    elif settings.start == "now":
        page = yield from _poll(run, BEGINNING, limit=0, block=0)
        if isinstance(page, Page):
            state.since = page.last_sequence or BEGINNING
    else:
        state.since = BEGINNING


def follow(run: FeedRun) -> Generator[Effect, Any, None]:
    """Snapshots and changes, handed out until the feed stops."""
    settings, state = run.settings, run.state
    while not state.stopping:
        if state.snapshot_reason is not None:
            taken = yield from snapshots.take(run, state.snapshot_reason)
            if taken is None:
                return
            yield Blocking(run.store_pending)  # the snapshot's end has been handled
            state.since, state.snapshot_reason = taken, None
            continue
        since = state.since
        assert since is not None
        page = yield from _poll(run, since, settings.limit, settings.block)
        if page is None:
            return
        if isinstance(page, Refusal):  # SNAPSHOT_TOO_OLD
            if settings.on_too_old == "raise":
                raise PositionLost(
                    f"the change log no longer holds the changes after {since} ({page}):"
                    " start from a snapshot (on_too_old='snapshot') or from the beginning"
                )
            state.snapshot_reason = "position too old"
            continue
        after = later(since, page.last_sequence) if page.last_sequence else since
        if page.changes:
            after = later(after, page.changes[-1].sequence)
        if after == since:
            continue
        position = Position(after, settings.selectors)
        if not page.changes:  # nothing of ours up to ``after``: a quiet selector moves on
            state.pending = position
        last = len(page.changes) - 1
        for index, change in enumerate(page.changes):
            if index == last:
                state.pending = position  # stored once the consumer is done with it
            yield Emit(change)
        yield Blocking(run.store_pending)
        state.since = after


def _poll(
    run: FeedRun, since: str, limit: int, block: int
) -> Generator[Effect, Any, Page | Refusal | None]:
    """One answer of ``/changes`` after ``since``: a page, the ``SNAPSHOT_TOO_OLD`` refusal,
    or ``None`` once stopping. Anything else that is not "not now" is raised."""
    settings = run.settings
    params = (*run.selector_params(), ("since", since), ("limit", str(limit)))
    if block:
        params += (("block", str(block)),)
    timeout = httpx.Timeout(settings.timeout, read=block + settings.read_grace)
    answer = yield from exchange(
        lambda base: Call("GET", base + "/changes", params, run.accept(), None, timeout),
        run.endpoints,
        settings.backoff,
        run.stopping,
    )
    if answer is None:
        return None
    if answer.status != 200:
        refusal = Refusal.of(answer.status, answer.body)
        if refusal.code == "SNAPSHOT_TOO_OLD":
            return refusal
        raise ChangeFeedError(f"GET /changes: {refusal}")
    try:
        if answer.headers.get("content-type", "").startswith(PROTOBUF):
            return page_from_protobuf(answer.body)
        return page_from_json(answer.body)
    except (ValueError, KeyError, TypeError, DecodeError) as error:
        raise ChangeFeedError(f"GET /changes answered what is not a change list: {error}") from None
