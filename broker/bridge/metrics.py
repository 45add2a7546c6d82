"""The bridge's metrics, read from its status when scraped (all in memory): per unit (a
table, or an outbox event type) events, lag and whether it is stopped; snapshot progress."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
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
        counter, gauge = CounterMetricFamily, GaugeMetricFamily

        def lag_seconds(unit: Mapping[str, Any]) -> float:
            behind = unit["lag_bytes"] > 0 and unit["commit_time"]
            return max(0.0, now - unit["commit_time"]) if behind else 0

        yield _per_unit(
            counter,
            "events",
            "Events committed to Kafka, per unit.",
            {u: v["events"] for u, v in units.items()},
        )
        yield _per_unit(
            gauge,
            "lag_bytes",
            "WAL bytes between a unit's position and the changeserver's newest change.",
            {u: v["lag_bytes"] for u, v in units.items()},
        )
        yield _per_unit(
            gauge,
            "lag_seconds",
            "While a unit is behind: the age of the newest change it committed; 0 caught up.",
            {u: lag_seconds(v) for u, v in units.items()},
        )
        yield _per_unit(
            gauge,
            "stopped",
            "1 while a unit is stopped waiting for an operator.",
            {u: int(v["stopped"] is not None) for u, v in units.items()},
        )
        yield _single(
            "stopped_units",
            "Units stopped waiting for an operator.",
            sum(1 for v in units.values() if v["stopped"] is not None),
        )
        yield _single("ready", "1 once the committed position is loaded.", int(status["ready"]))
        yield _single(
            "position_lag_bytes",
            "WAL bytes between the bridge's committed position and the changeserver's newest.",
            status["lag_bytes"],
        )
        runs = {u: v["snapshot"] for u, v in units.items() if v["snapshot"]}
        yield _per_unit(
            gauge,
            "snapshot_rows_read",
            "Rows the table's newest snapshot has read and committed.",
            {u: run["rows_read"] for u, run in runs.items()},
        )
        yield _per_unit(
            gauge,
            "snapshot_rows_estimated",
            "Rows the table had when that snapshot started (pg_class.reltuples).",
            {u: run["estimated_rows"] for u, run in runs.items()},
        )
        yield _per_unit(
            gauge,
            "snapshot_running",
            "1 while the table's snapshot runs.",
            {u: int(run["state"] == "running") for u, run in runs.items()},
        )


def _per_unit(
    kind: type[CounterMetricFamily | GaugeMetricFamily],
    name: str,
    help_text: str,
    values: Mapping[str, float],
) -> Metric:
    family = kind(f"{PREFIX}_{name}", help_text, labels=["unit"])
    for unit, value in values.items():
        family.add_metric([unit], value)
    return family


def _single(name: str, help_text: str, value: float) -> Metric:
    family = GaugeMetricFamily(f"{PREFIX}_{name}", help_text)
    family.add_metric([], value)
    return family
