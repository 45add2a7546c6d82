"""Every service of a running stack, each its own process as ``changebroker up`` runs them
(the broker with two worker processes), scraped and read with prometheus_client's parser:
each family exists and moves under a small load, and the broker's counters add up its
workers. The Grafana dashboard and the alert rules name only metrics these scrapes hold."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest

from changebroker import pg
from changebroker.stack.processes import free_port, wait_until
from changebroker.stack.run import CliProcess
from tests.broker.subscription_support import Stream, commit, create
from tests.support.event_types import business_event_type
from tests.support.metrics import Scrape, scrape
from tests.test_monitoring_config import alert_exprs, dashboard_exprs, metric_names

CS = "changebroker_changeserver"
BROKER = "changebroker_broker"
REGISTRY = "changebroker_registry"
BRIDGE = "changebroker_bridge"
PROCESS = ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds")
DURATION = "http_server_request_duration_seconds_count"
PUBLISHED = 1_000


@dataclass
class Running:
    app_dsn: str
    changeserver: str  # API
    metrics: dict[str, str]  # service -> its /metrics URL
    registry: str
    broker: str
    bridge: str
    console: str
    prefix: str
    broker_metrics_dir: Path  # the workers' prometheus_client multiprocess files

    def scrape_all(self) -> dict[str, Scrape]:
        return {service: scrape(url) for service, url in self.metrics.items()}


@pytest.fixture(scope="module")
def running(
    pg_server_dsn: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("metrics-stack")
    token = uuid.uuid4().hex[:8]
    slot, prefix = f"metrics_{token}", f"m{token}"
    with contextlib.ExitStack() as exits:
        app_dsn = exits.enter_context(pg.scratch_database(pg_server_dsn, "t_app"))
        meta_dsn = exits.enter_context(pg.scratch_database(pg_server_dsn, "t_meta"))
        with psycopg.connect(app_dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE orders (id int PRIMARY KEY, note text)")
        ports = {name: free_port() for name in ("cs", "mgmt", "reg", "broker", "bridge", "con")}
        url = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
        env = {"CHANGEBROKER_KAFKA_BOOTSTRAP": kafka_bootstrap}

        def start(args: list[str], ready: str) -> None:
            process = CliProcess(args, ready, tmp / f"{args[0]}.log", env=env)
            exits.callback(process.stop)
            process.start(timeout=120)

        start(
            [
                *("changeserver", "--pg-url", app_dsn, "--slot", slot),
                *("--db-dir", str(tmp / "changelog"), "--snapshots-dir", str(tmp / "snapshots")),
                *("--port", str(ports["cs"]), "--mgmt-port", str(ports["mgmt"])),
                *("--metrics-interval", "0.5"),
            ],
            f"{url['mgmt']}/ready",
        )
        start(
            ["registry", "--port", str(ports["reg"]), "--pg-url", meta_dsn], f"{url['reg']}/health"
        )
        start(
            [
                *("broker", "--port", str(ports["broker"]), "--pg-url", meta_dsn),
                *("--workers", "2"),
                *("--metrics-dir", str(tmp / "broker-metrics"), "--lag-interval", "0.5"),
            ],
            f"{url['broker']}/health",
        )
        start(
            [
                *("bridge", "--port", str(ports["bridge"]), "--pg-url", app_dsn),
                *("--meta-pg-url", meta_dsn, "--changeserver-url", url["cs"]),
                *("--broker-url", url["broker"], "--name", prefix, "--prefix", prefix),
                *("--publication", slot, "--partitions", "2"),
            ],
            f"{url['bridge']}/health",
        )
        start(
            [
                *("console", "--port", str(ports["con"]), "--broker-url", url["broker"]),
                *("--registry-url", url["reg"], "--changeserver-url", url["cs"]),
                *("--changeserver-mgmt-url", url["mgmt"], "--bridge-url", url["bridge"]),
            ],
            f"{url['con']}/health",
        )
        yield Running(
            app_dsn=app_dsn,
            changeserver=url["cs"],
            metrics={
                "changeserver": f"{url['mgmt']}/metrics",
                "registry": f"{url['reg']}/metrics",
                "broker": f"{url['broker']}/metrics",
                "bridge": f"{url['bridge']}/metrics",
                "console": f"{url['con']}/metrics",
            },
            registry=url["reg"],
            broker=url["broker"],
            bridge=url["bridge"],
            console=url["con"],
            prefix=prefix,
            broker_metrics_dir=tmp / "broker-metrics",
        )


def _publish(broker: str, name: str, count: int, batch: int = 100) -> None:
    """``count`` events in batches, each on a new connection (so both workers take some)."""
    for start in range(0, count, batch):
        events = [
            {
                "order_number": str(n),
                "metadata": {"eid": str(uuid.uuid4()), "occurred_at": "2026-11-23T10:00:00Z"},
            }
            for n in range(start, min(start + batch, count))
        ]
        response = httpx.post(f"{broker}/event-types/{name}/events", json=events, timeout=30)
        assert response.status_code == 200, response.text


def _grew(before: Scrape, after: Scrape) -> Callable[..., float]:
    def grew(name: str, **labels: str) -> float:
        return after.total(name, **labels) - before.total(name, **labels)

    return grew


def test_every_service_exports_its_families_and_they_move(running: Running) -> None:
    before = running.scrape_all()
    for service, found in before.items():
        for name in PROCESS:
            assert found.has(name), f"{service} lacks {name}"
        assert "python_gc_collections" in found.families, service

    # The load: rows through the bridge, events published, a subscription read and committed,
    # schemas registered and looked up, a page of the console, a refused /changes.
    with psycopg.connect(running.app_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO orders SELECT n, 'x' FROM generate_series(1, 10) n")
    table_type = f"{running.prefix}.public.orders"

    def bridged() -> bool:
        units = httpx.get(f"{running.bridge}/status", timeout=10).json()["units"]
        return units.get("public.orders", {}).get("events", 0) == 10

    wait_until(bridged, timeout=60, what="the bridge to publish 10 events")
    name = f"metrics.{uuid.uuid4().hex[:8]}"
    created = httpx.post(f"{running.broker}/event-types", json=business_event_type(name))
    assert created.status_code == 201, created.text
    _publish(running.broker, name, 50)
    bad = httpx.post(f"{running.broker}/event-types/{name}/events", json=[{"order_number": 1}])
    assert bad.status_code == 422
    with httpx.Client(base_url=running.broker, timeout=30) as client:
        subscription = create(client, [table_type], read_from="begin")

        def unconsumed() -> float:
            found = scrape(running.metrics["broker"])
            return found.total(
                f"{BROKER}_subscription_unconsumed_events", subscription=subscription["id"]
            )

        stream = Stream(client, subscription["id"], batch_flush_timeout=1, batch_limit=5)
        try:
            # Counted from the committed cursors (the stream's first read set them up).
            wait_until(lambda: unconsumed() == 10, timeout=30, what="10 unconsumed events")
            during = scrape(running.metrics["broker"])
            assert during.total(f"{BROKER}_open_streams", kind="subscription") >= 1
            for batch in stream.read_events(10):
                assert commit(client, subscription["id"], stream.id, [batch["cursor"]]).is_success
            # Consumed to the end of the bridge's transactional topic: nothing is left.
            wait_until(lambda: unconsumed() == 0, timeout=30, what="no unconsumed events")
        finally:
            stream.close()
    schema = {"serialization": "json", "schemaDefinition": {"type": "object"}}
    subject = f"metrics-{uuid.uuid4().hex[:8]}"
    assert httpx.post(f"{running.registry}/subjects/{subject}/versions", json=schema).is_success
    assert httpx.get(f"{running.registry}/subjects/{subject}/versions").is_success
    assert (
        httpx.get(f"{running.changeserver}/changes", params={"since": "0.1.0"}).status_code == 400
    )
    assert httpx.get(f"{running.console}/", timeout=30).is_success

    def changeserver_caught_up() -> bool:
        found = scrape(running.metrics["changeserver"])
        return found.total(f"{CS}_changes_ingested_total") >= 10 and (
            found.value(f"{CS}_replication_lag_bytes") is not None
        )

    wait_until(changeserver_caught_up, timeout=30, what="the changeserver's numbers")
    scraped: dict[str, Scrape] = {}

    def read_everywhere() -> bool:
        # A worker answers with its last refresh and starts the next one: until both workers
        # refreshed since the subscription started, one may not know it yet.
        scraped.update(running.scrape_all())
        return scraped["broker"].has(f"{BROKER}_subscription_lag_seconds")

    wait_until(read_everywhere, timeout=30, what="the subscription's lag on the scraped worker")
    after = scraped
    grew = {service: _grew(before[service], after[service]) for service in after}

    cs = grew["changeserver"]
    assert cs(f"{CS}_changes_ingested_total") == 10
    assert cs(f"{CS}_ingested_bytes_total") > 0
    assert cs(f"{CS}_refusals_total", code="SNAPSHOT_TOO_OLD") == 1
    assert cs(DURATION, route="/changes", status="400") == 1
    assert cs(DURATION, route="/changes", status="200") >= 1  # the bridge's long polls
    for gauge in (
        "replication_lag_bytes",
        "replication_lag_seconds",
        "slot_retained_wal_bytes",
        "changelog_bytes",
        "changelog_first_lsn",
        "changelog_last_lsn",
        "longpoll_waiters",
    ):
        assert after["changeserver"].has(f"{CS}_{gauge}"), gauge
    assert (after["changeserver"].value(f"{CS}_changelog_last_lsn") or 0) > 0

    broker = grew["broker"]
    assert broker(f"{BROKER}_events_published_total", event_type=name) == 50
    assert broker(f"{BROKER}_published_bytes_total", event_type=name) > 50 * 40
    assert broker(f"{BROKER}_publish_batches_total", event_type=name, status="200") == 1
    assert broker(f"{BROKER}_publish_batches_total", event_type=name, status="422") == 1
    assert broker(f"{BROKER}_publish_failures_total", step="validating") == 1
    assert broker(f"{BROKER}_publish_duration_seconds_count") >= 2
    assert broker(f"{BROKER}_publish_batch_events_sum") >= 50
    assert broker(f"{BROKER}_cursor_commits_total", result="committed") >= 2
    assert after["broker"].has(f"{BROKER}_kafka_producer_queue_messages")
    assert after["broker"].has(f"{BROKER}_kafka_delivery_errors_total")
    assert after["broker"].has(f"{BROKER}_subscription_lag_seconds")
    assert broker(DURATION, route="/event-types/{name}/events", method="POST", status="200") == 1

    registry = grew["registry"]
    assert registry(f"{REGISTRY}_registrations_total", result="new") == 1
    assert registry(f"{REGISTRY}_lookups_total", kind="versions") == 1

    bridge = after["bridge"]
    assert bridge.value(f"{BRIDGE}_events_total", unit="public.orders") == 10
    assert bridge.value(f"{BRIDGE}_stopped", unit="public.orders") == 0
    assert bridge.value(f"{BRIDGE}_stopped_units") == 0
    assert bridge.has(f"{BRIDGE}_lag_bytes") and bridge.has(f"{BRIDGE}_lag_seconds")
    assert grew["console"](DURATION, route="/", status="200") >= 1

    # Bounded labels: route templates, never a raw path or an event's id.
    for service, found in after.items():
        routes = {dict(labels).get("route") for _, labels in found.samples} - {None}
        assert not any(name in str(route) or subject in str(route) for route in routes), service

    # What the dashboard and the alert rules query, the services export.
    exported = {name for found in after.values() for name in found.names()}
    exported.add("up")  # Prometheus's own, per target
    # Exported once the replay wrote a snapshot (its tests run Spark; this stack has none).
    exported.add(f"{CS}_snapshot_age_seconds")
    for expr in [*dashboard_exprs(), *alert_exprs()]:
        missing = metric_names(expr) - exported
        assert not missing, f"{expr!r} reads {missing}, which no service exports"


def test_two_broker_workers_count_every_event_in_one_scrape(running: Running) -> None:
    name = f"workers.{uuid.uuid4().hex[:8]}"
    created = httpx.post(f"{running.broker}/event-types", json=business_event_type(name))
    assert created.status_code == 201, created.text
    _publish(running.broker, name, PUBLISHED, batch=20)
    # Each scrape on a new connection: whichever worker answers, it counts both workers'.
    for _ in range(6):
        found = scrape(running.metrics["broker"])
        assert found.value(f"{BROKER}_events_published_total", event_type=name) == PUBLISHED
        assert found.value(f"{BROKER}_publish_batches_total", event_type=name, status="200") == 50
    # One set of files per worker process: two processes wrote them.
    writers = {path.stem.rsplit("_", 1)[-1] for path in running.broker_metrics_dir.glob("*.db")}
    assert len(writers) >= 2, writers
