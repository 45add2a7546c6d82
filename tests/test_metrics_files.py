"""The workers' multiprocess files read once and then only what they add
(changebroker/metrics_files.py) give the families and numbers prometheus_client's own
``MultiProcessCollector`` gives, at every step: values moved, entries appended, a worker
started, a worker gone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pytest
from prometheus_client import Counter, Gauge, Histogram, generate_latest, values
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from changebroker.metrics_files import WorkerFiles

Families = dict[tuple[str, str], set[tuple[str, frozenset[tuple[str, str]], float]]]
GAUGE_MODES: tuple[Literal["livesum", "all", "max", "min", "mostrecent"], ...] = (
    "livesum",
    "all",
    "max",
    "min",
    "mostrecent",
)


class Worker:
    """One worker's metrics, written to the directory's files under its own process id (as
    prometheus_client's real multiprocess values write them)."""

    def __init__(self, pid: int, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(values, "ValueClass", values.MultiProcessValue(lambda: pid))
        self.events = Counter("t_events_total", "Events.", ["event_type"], registry=None)
        self.duration = Histogram(
            "t_duration_seconds", "Durations.", ["route"], buckets=(0.1, 1), registry=None
        )
        self.gauges = {
            mode: Gauge(f"t_{mode}", f"A {mode} gauge.", multiprocess_mode=mode, registry=None)
            for mode in GAUGE_MODES
        }
        self.pid = pid


def _families(text: str) -> Families:
    found: Families = {}
    for family in text_string_to_metric_families(text):
        found[(family.name, family.type)] = {
            (s.name, frozenset(s.labels.items()), s.value) for s in family.samples
        }
    return found


def test_worker_files_read_as_prometheus_client_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    files = WorkerFiles(tmp_path)  # one for the whole test: later reads are incremental

    def same_as_prometheus_client() -> Families:
        reference = CollectorRegistry()
        MultiProcessCollector(reference, path=str(tmp_path))
        expected = _families(generate_latest(reference).decode())
        assert _families(files.text()) == expected
        return expected

    def worker(pid: int, step: Callable[[Worker], None]) -> Worker:
        started = Worker(pid, monkeypatch)
        step(started)
        return started

    def first(w: Worker) -> None:
        w.events.labels("a").inc(w.pid)
        w.duration.labels("/x").observe(0.05 * w.pid)
        for number, gauge in enumerate(w.gauges.values()):
            gauge.set(w.pid * 10 + number)

    a, b = worker(1, first), worker(2, first)
    found = same_as_prometheus_client()
    events = ("t_events", "counter")
    assert ("t_events_total", frozenset({("event_type", "a")}), 3.0) in found[events]

    # Values move in place; new label values append entries to files already read.
    a.events.labels("a").inc(5)
    a.events.labels("b").inc()
    b.duration.labels("/x").observe(2)
    b.duration.labels("/y").observe(0.5)
    a.gauges["max"].set(99)
    a.gauges["mostrecent"].set(-1)
    found = same_as_prometheus_client()
    assert ("t_events_total", frozenset({("event_type", "a")}), 8.0) in found[events]
    assert ("t_max", frozenset(), 99.0) in found[("t_max", "gauge")]

    # A third worker starts; the second ends, and its live gauge stops counting.
    worker(3, first)
    mark_process_dead(2, str(tmp_path))
    found = same_as_prometheus_client()
    assert ("t_livesum", frozenset(), 10.0 + 30.0) in found[("t_livesum", "gauge")]
