"""docker/'s monitoring: Prometheus's config and alert rules pass promtool (the rules' own
unit tests included), and the Grafana dashboard is well formed. That every query names a
metric the services export is checked against a running stack in tests/test_metrics_stack.py.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support import REPO_ROOT

DOCKER = REPO_ROOT / "docker"
PROMETHEUS = DOCKER / "prometheus"
DASHBOARD = DOCKER / "grafana" / "dashboards" / "changebroker.json"
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset", "le", "inf", "nan",
}  # fmt: skip
_IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def promtool(*args: str, cwd: Path = PROMETHEUS) -> str:
    done = subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are not functions,
    keywords, label names or inside label matchers, durations or strings."""
    text = re.sub(r'"[^"]*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range durations
    text = re.sub(r"(?<![\w:])\d+(\.\d+)?([eE][+-]?\d+)?", "", text)  # numbers: 0.99, 1e9
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", text)  # grouping labels
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name = match.group(0)
        following = text[match.end() :].lstrip()[:1]
        if following == "(" or name.lower() in PROMQL_WORDS:
            continue
        names.add(name)
    return names


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def alert_exprs() -> list[str]:
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def test_prometheus_config_and_alert_rules_pass_promtool() -> None:
    assert "SUCCESS" in promtool("check", "config", "prometheus.yml")
    assert "SUCCESS" in promtool("test", "rules", "alerts_test.yml")
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    assert jobs == {"changeserver", "registry", "broker", "bridge", "console"}
    alerts = {
        rule["alert"]
        for group in yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())["groups"]
        for rule in group["rules"]
    }
    assert {
        "ReplicationSlotWalGrowing",
        "BridgeStopped",
        "ConsumerLagHigh",
        "HighServerErrorRate",
    } <= alerts


def test_the_dashboard_is_well_formed_and_provisioned() -> None:
    board = dashboard()
    assert board["uid"] and board["title"] and isinstance(board["schemaVersion"], int)
    panels = board["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    datasources = yaml.safe_load(
        (DOCKER / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )["datasources"]
    uid = datasources[0]["uid"]
    occupied: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells
        if panel["type"] == "row":
            continue
        assert panel["type"] in {"timeseries", "stat"}, panel["type"]
        assert panel["datasource"]["uid"] == uid
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs))
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == uid
            assert metric_names(target["expr"]), target["expr"]
    # The first screen holds the whole pipeline's lag, Postgres to subscribers.
    first_screen = " ".join(
        t["expr"] for p in panels if p["gridPos"]["y"] < 13 for t in p.get("targets", [])
    )
    for hop in (
        "changebroker_changeserver_slot_retained_wal_bytes",
        "changebroker_changeserver_replication_lag_seconds",
        "changebroker_bridge_lag_seconds",
        "changebroker_broker_subscription_lag_seconds",
    ):
        assert hop in first_screen
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    grafana_volumes = " ".join(compose["services"]["grafana"]["volumes"])
    assert "./grafana/dashboards:/var/lib/grafana/dashboards" in grafana_volumes
    provider = yaml.safe_load(
        (DOCKER / "grafana" / "provisioning" / "dashboards" / "changebroker.yml").read_text()
    )
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def test_metric_names_are_read_from_promql() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (job, le) (rate(http_server_request_duration_seconds"
        '_bucket{status=~"5.."}[5m]))) / on (job) group_left max(up) > 0.5 or x_2 > 1e9'
    )
    assert metric_names(expr) == {"http_server_request_duration_seconds_bucket", "up", "x_2"}
