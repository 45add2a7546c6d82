"""The bridge's metrics, read from its status when scraped (all in memory): per unit (a
table, or an outbox event type) events, lag and whether it is stopped; snapshot progress."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

PREFIX = "changebroker_bridge"


class BridgeCollector:
    def __init__(self, status: Any) -> None:
        self.status = status  # () -> the bridge's /status body

    def collect(self) -> Iterator[Metric]:
        status = self.status()
        units: dict[str, dict[str, Any]] = status["units"]
        now = time.time()

        def family(
            kind: type[CounterMetricFamily | GaugeMetricFamily], name: str, help_text: str
        ) -> Any:
            return kind(f"{PREFIX}_{name}", help_text, labels=["unit"])

        events = family(CounterMetricFamily, "events", "Events committed to Kafka, per unit.")
        lag_bytes = family(
            GaugeMetricFamily,
            "lag_bytes",
            "WAL bytes between a unit's position and the changeserver's newest change.",
        )
        lag_seconds = family(
            GaugeMetricFamily,
            "lag_seconds",
            "While a unit is behind: the age of the newest change it committed; 0 caught up.",
        )
        stopped = family(
            GaugeMetricFamily, "stopped", "1 while a unit is stopped waiting for an operator."
        )
        for unit, value in units.items():
            events.add_metric([unit], value["events"])
            lag_bytes.add_metric([unit], value["lag_bytes"])
            behind = value["lag_bytes"] > 0 and value["commit_time"]
            lag_seconds.add_metric([unit], max(0.0, now - value["commit_time"]) if behind else 0)
            stopped.add_metric([unit], int(value["stopped"] is not None))
        yield from (events, lag_bytes, lag_seconds, stopped)
        units_stopped = GaugeMetricFamily(
            f"{PREFIX}_stopped_units", "Units stopped waiting for an operator."
        )
        units_stopped.add_metric([], sum(1 for v in units.values() if v["stopped"] is not None))
        ready = GaugeMetricFamily(f"{PREFIX}_ready", "1 once the committed position is loaded.")
        ready.add_metric([], int(status["ready"]))
        behind = GaugeMetricFamily(
            f"{PREFIX}_position_lag_bytes",
            "WAL bytes between the bridge's committed position and the changeserver's newest.",
        )
        behind.add_metric([], status["lag_bytes"])
        yield from (units_stopped, ready, behind)

        runs = {u: v["snapshot"] for u, v in units.items() if v["snapshot"]}
        read = family(
            GaugeMetricFamily,
            "snapshot_rows_read",
            "Rows the table's newest snapshot has read and committed.",
        )
        estimated = family(
            GaugeMetricFamily,
            "snapshot_rows_estimated",
            "Rows the table had when that snapshot started (pg_class.reltuples).",
        )
        running = family(
            GaugeMetricFamily, "snapshot_running", "1 while the table's snapshot runs."
        )
        for unit, run in runs.items():
            read.add_metric([unit], run["rows_read"])
            estimated.add_metric([unit], run["estimated_rows"])
            running.add_metric([unit], int(run["state"] == "running"))
        yield from (read, estimated, running)
