"""Counters served at ``/metrics`` in the Prometheus text format (per process)."""

from __future__ import annotations

import threading
from collections.abc import Iterable


class Counter:
    def __init__(self, name: str, help_text: str) -> None:
        self.name = name
        self.help_text = help_text
        self._values: dict[tuple[tuple[str, str], ...], float] = {}
        self._lock = threading.Lock()

    def inc(self, amount: float = 1, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            self._values[key] = self._values.get(key, 0) + amount

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help_text}"
        yield f"# TYPE {self.name} counter"
        with self._lock:
            values = list(self._values.items())
        for labels, value in values:
            text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
            yield f"{self.name}{{{text}}} {value:g}" if text else f"{self.name} {value:g}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


events = Counter("nakadi_events_published_total", "Events written to Kafka, per event type.")
batches = Counter(
    "nakadi_publish_batches_total", "Publish requests per event type and response status."
)
ALL = (events, batches)


def render() -> str:
    return "\n".join(line for counter in ALL for line in counter.render()) + "\n"
