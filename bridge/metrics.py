"""The bridge's metrics, read from its status when scraped (all in memory): per unit (a
table, or an outbox event type) events, lag and whether it is stopped; snapshot progress."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

PREFIX = "changebroker_bridge"


Unit = Mapping[str, Any]

# Per unit: (family, name, help, value of a unit's status at time `now`).
Family = type[CounterMetricFamily | GaugeMetricFamily]

PER_UNIT: tuple[tuple[Family, str, str, Callable[[Unit, float], float]], ...] = (
    (
        CounterMetricFamily,
        "events",
        "Events committed to Kafka, per unit.",
        lambda unit, now: unit["events"],
    ),
    (
        GaugeMetricFamily,
        "lag_bytes",
        "WAL bytes between a unit's position and the changeserver's newest change.",
        lambda unit, now: unit["lag_bytes"],
    ),
    (
        GaugeMetricFamily,
        "lag_seconds",
        "While a unit is behind: the age of the newest change it committed; 0 caught up.",
        lambda unit, now: _lag_seconds(unit, now),
    ),
    (
        GaugeMetricFamily,
        "stopped",
        "1 while a unit is stopped waiting for an operator.",
        lambda unit, now: int(unit["stopped"] is not None),
    ),
)

# Per table with a snapshot: (name, help, value of the snapshot run's status).
PER_SNAPSHOT: tuple[tuple[str, str, Callable[[Unit], float]], ...] = (
    (
        "snapshot_rows_read",
        "Rows the table's newest snapshot has read and committed.",
        lambda run: run["rows_read"],
    ),
    (
        "snapshot_rows_estimated",
        "Rows the table had when that snapshot started (pg_class.reltuples).",
        lambda run: run["estimated_rows"],
    ),
    (
        "snapshot_running",
        "1 while the table's snapshot runs.",
        lambda run: int(run["state"] == "running"),
    ),
)


class BridgeCollector:
    def __init__(self, status: Any) -> None:
        self.status = status  # () -> the bridge's /status body

    def collect(self) -> Iterator[Metric]:
        status = self.status()
        units: dict[str, Unit] = status["units"]
        now = time.time()
        for kind, name, help_text, value in PER_UNIT:
            yield _per_unit(kind, name, help_text, {u: value(v, now) for u, v in units.items()})
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
        for name, help_text, of_run in PER_SNAPSHOT:
            yield _per_unit(
                GaugeMetricFamily, name, help_text, {u: of_run(run) for u, run in runs.items()}
            )


def _lag_seconds(unit: Unit, now: float) -> float:
    behind = unit["lag_bytes"] > 0 and unit["commit_time"]
    return max(0.0, now - unit["commit_time"]) if behind else 0


def _per_unit(
    kind: Family,
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
