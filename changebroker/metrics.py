"""Prometheus metrics, one way for every service: prometheus_client's registry, ``/metrics``,
request duration by route template, and process metrics.

Counters and histograms are module-level prometheus_client objects in each service's own
``metrics`` module. Numbers read from elsewhere (Kafka watermarks, the change log, the
replication slot) are collectors the app passes to ``route``: they run in the process that
answers the scrape, so they are right whichever worker that is.

A service running several worker processes (the broker's ``--workers``) calls
``use_multiprocess_dir`` before it starts them: prometheus_client's multiprocess mode, where
each worker writes its values to files in that directory and the worker answering a scrape
adds up every worker's (``metrics_files``: as prometheus_client's ``MultiProcessCollector``
does, but each file parsed once). The directory is emptied first (a previous run's files
would count).
Process metrics are then those of all the service's processes, summed.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
import os
import shutil
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableMapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import mark_process_dead
from prometheus_client.parser import text_string_to_metric_families
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from changebroker.http.accept import accepted
from changebroker.metrics_files import WorkerFiles

log = logging.getLogger(__name__)

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Up to a minute: long polls (/changes?block=) and event streams are requests too.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
UNMATCHED_ROUTE = "unmatched"  # every path no route serves: one label value, not the raw path


def use_multiprocess_dir(directory: Path) -> None:
    """Before starting worker processes: they share ``directory`` (emptied now) for metrics.

    The workers inherit the variable and read it when they import prometheus_client.
    """
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    os.environ[MULTIPROCESS_ENV] = str(directory)


def multiprocess() -> bool:
    return bool(os.environ.get(MULTIPROCESS_ENV))


def worker_exiting() -> None:
    """A worker process's end: its live gauges (open streams, queue depth) stop counting."""
    if multiprocess():
        mark_process_dead(os.getpid())


http_request_duration = Histogram(
    "http_server_request_duration_seconds",
    "HTTP requests by method, route template and status, until the response ended.",
    ["method", "route", "status"],
    buckets=DURATION_BUCKETS,
)


class Collector(Protocol):
    def collect(self) -> Iterable[Metric]: ...


_Labelled = TypeVar("_Labelled", bound=MetricWrapperBase)
# Labelled children by metric and label values: what ``labelled`` has handed out.
_children: dict[tuple[int, tuple[str, ...]], Any] = {}


def labelled(metric: _Labelled, *values: str) -> _Labelled:
    """``metric.labels(*values)``, kept for the next call: on a request's path. labels() costs
    ~1.5 us a call (a lock, a key, a lookup); a single-event publish called it five times.
    Children are never removed, here or by prometheus_client, so a kept one stays live."""
    key = (id(metric), values)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*values)
    return child


def observe_request(scope: MutableMapping[str, Any], status: int, seconds: float) -> None:
    """One request into the duration histogram (the ASGI middleware in ``http`` calls it)."""
    route = getattr(scope.get("route"), "path", None) or UNMATCHED_ROUTE
    _count_pending_gc()
    labelled(http_request_duration, scope["method"], route, str(status)).observe(seconds)


Text = Callable[[], bytes]


class _Exposition:
    """What one scrape answers: the service's own metrics (this process's, or every worker's
    from the multiprocess directory), process metrics, the app's collectors, then ``texts``:
    families an app renders once per refresh rather than per scrape (a thousand
    subscriptions' lag)."""

    def __init__(self, collectors: Iterable[Collector], texts: Iterable[Text] = ()) -> None:
        self.collectors = list(collectors)
        self.texts = list(texts)
        directory = os.environ.get(MULTIPROCESS_ENV)
        self.workers = WorkerFiles(Path(directory)) if directory else None
        self._lock = threading.Lock()  # scrapes run in threads; the files' parse is shared

    def collect(self) -> Iterator[Metric]:
        if self.workers is not None:
            yield from _ServiceProcesses().collect()
        else:
            yield from REGISTRY.collect()
        for collector in self.collectors:
            yield from collector.collect()

    def text(self) -> bytes:
        """The Prometheus text of this service now."""
        parts = []
        if self.workers is not None:
            with self._lock:
                parts.append(self.workers.text().encode())
        parts.append(generate_latest(self))
        parts += [text() for text in self.texts]
        return b"".join(parts)


Refresh = Callable[[], Awaitable[None]]


def route(
    collectors: Iterable[Collector] = (),
    refresh: Iterable[Refresh] = (),
    texts: Iterable[Text] = (),
    *,
    nakadi_json: bool = False,
) -> Route:
    """``GET /metrics``; each ``refresh`` (an ``Interval``) is asked first, and the text is
    rendered off the event loop (collectors may read files or databases). ``nakadi_json``:
    a request that does not ask for Prometheus text by its ``Accept`` gets the same samples
    in the JSON of Nakadi's ``/metrics`` (:func:`nakadi_json_of`)."""
    refreshes = list(refresh)
    exposing = _Exposition(collectors, texts)

    async def metrics(request: Request) -> Response:
        for step in refreshes:
            await step()
        body = await asyncio.to_thread(exposing.text)
        if nakadi_json and not wants_prometheus_text(request.headers.get("accept")):
            return JSONResponse(nakadi_json_of(body.decode()))
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return Route("/metrics", metrics, methods=["GET"])


# What a Prometheus scraper's Accept names, for clients of ours that scrape.
PROMETHEUS_ACCEPT = "text/plain;version=0.0.4"


def wants_prometheus_text(accept: str | None) -> bool:
    """Whether ``Accept`` names Prometheus's formats, as every Prometheus scraper's does
    (``text/plain;version=0.0.4``, ``application/openmetrics-text``); ``*/*`` does not."""
    return any(media in _PROMETHEUS_MEDIA for _, media in accepted(accept or ""))


_PROMETHEUS_MEDIA = frozenset({"text/plain", "application/openmetrics-text"})


# The metric kinds of Nakadi's /metrics (Dropwizard's JSON): Prometheus families map to the
# first three; Dropwizard's meters and timers have no Prometheus kind and stay empty.
_NAKADI_SECTIONS = {"counter": "counters", "gauge": "gauges", "histogram": "histograms"}


def nakadi_json_of(text: str) -> dict[str, Any]:
    """Prometheus text as the JSON Nakadi's ``/metrics`` answers: ``version``, then
    ``counters`` (``{"count": n}``), ``gauges`` (``{"value": v}``), ``histograms``
    (``{"count": n, "sum": s}``), ``meters`` and ``timers``, each keyed by the sample's name
    and labels as Prometheus writes them."""
    found: dict[str, Any] = {
        "version": "4.0.0",
        "counters": {},
        "gauges": {},
        "histograms": {},
        "meters": {},
        "timers": {},
    }
    for family in text_string_to_metric_families(text):
        section = found[_NAKADI_SECTIONS.get(family.type, "gauges")]
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            if family.type == "histogram":
                if sample.name.endswith(("_count", "_sum")) and "le" not in sample.labels:
                    key = family.name + (f"{{{labels}}}" if labels else "")
                    field = "count" if sample.name.endswith("_count") else "sum"
                    section.setdefault(key, {})[field] = sample.value
                continue
            key = sample.name + (f"{{{labels}}}" if labels else "")
            section[key] = {"count" if family.type == "counter" else "value": sample.value}
    return found


class Interval:
    """Runs an expensive refresh at most once per ``seconds``, however often it is asked, and
    never makes a scrape wait for it but the first: a stale scrape starts the refresh in the
    background and answers with the last values, so scraping cost does not grow with what
    the refresh reads (a thousand subscriptions' lag)."""

    def __init__(self, seconds: float, refresh: Refresh) -> None:
        self.seconds = seconds
        self._refresh = refresh
        self._done_at: float | None = None
        self._running: asyncio.Task[None] | None = None

    async def __call__(self) -> None:
        if self._done_at is None:
            await self._start()
        elif time.monotonic() - self._done_at >= self.seconds and self._running is None:
            self._running = asyncio.create_task(self._run())

    async def _start(self) -> None:
        if self._running is None:
            self._running = asyncio.create_task(self._run())
        await asyncio.shield(self._running)

    async def _run(self) -> None:
        try:
            await self._refresh()
        except Exception:  # the last values stay; the next interval tries again
            log.exception("metrics refresh failed")
        finally:
            self._done_at = time.monotonic()
            self._running = None


class _ServiceProcesses:
    """process_* of every process of a multi-worker service (the supervisor and its
    children), summed; the start time is the oldest one's."""

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for pid in _service_pids():
            collector = ProcessCollector(pid=lambda pid=pid: pid, registry=None)  # type: ignore[misc]
            for metric in collector.collect():
                found = merged.get(metric.name)
                if found is None:
                    merged[metric.name] = metric
                    continue
                for mine, theirs in zip(found.samples, metric.samples, strict=False):
                    if metric.name == "process_start_time_seconds":
                        value = min(mine.value, theirs.value)
                    elif metric.name == "process_max_fds":
                        value = mine.value
                    else:
                        value = mine.value + theirs.value
                    found.samples[found.samples.index(mine)] = mine._replace(value=value)
        yield from merged.values()


def _service_pids() -> list[int]:
    """This worker's parent (the supervisor) and every child of it."""
    parent = os.getppid()
    pids = [parent]
    for task in Path(f"/proc/{parent}/task").glob("*/children"):
        try:
            pids += [int(pid) for pid in task.read_text().split()]
        except OSError:
            continue
    return pids or [os.getpid()]


# Registered nowhere: in multiprocess mode the values live in the directory's files; in one
# process the default GC collector serves these names instead.
_gc_collections = Counter(
    "python_gc_collections_total",
    "Collections by generation (every worker).",
    ["generation"],
    registry=None,
)
_gc_collected = Counter(
    "python_gc_objects_collected_total",
    "Objects collected by generation.",
    ["generation"],
    registry=None,
)
_gc_uncollectable = Counter(
    "python_gc_objects_uncollectable_total",
    "Uncollectable objects by generation.",
    ["generation"],
    registry=None,
)


# Collections not counted yet: (generation, collected, uncollectable).
_gc_pending: collections.deque[tuple[str, int, int]] = collections.deque()


def _count_gc(phase: str, info: dict[str, int]) -> None:
    # Only noted here: a collection can start while this thread holds prometheus_client's
    # lock (making a labelled child, say), and a counter incremented here would wait for
    # that lock forever. Each request counts what is pending (``observe_request``).
    if phase == "stop":
        _gc_pending.append((str(info["generation"]), info["collected"], info["uncollectable"]))


def _count_pending_gc() -> None:
    while _gc_pending:
        generation, collected, uncollectable = _gc_pending.popleft()
        _gc_collections.labels(generation).inc()
        _gc_collected.labels(generation).inc(collected)
        _gc_uncollectable.labels(generation).inc(uncollectable)


if multiprocess():
    # The default GC collector reads this process only: counting collections as they end
    # gives every worker's, summed like any counter.
    gc.callbacks.append(_count_gc)
