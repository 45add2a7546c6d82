"""``changebroker replay --master spark://...`` on a real standalone cluster (a master and a
worker started from pyspark's own distribution) writes the same snapshot as ``local[*]``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from changebroker.stack.processes import wait_until
from tests.support.bridge_stack import Rebuilt, Stack
from tests.support.spark_cluster import LOOPBACK_ENV, standalone_cluster

pytestmark = pytest.mark.spark


def _replay(stack: Stack, master: str, out: Path, log: Path) -> dict[str, Any]:
    """Run the replay as a user does; its manifest."""
    command = [
        *(sys.executable, "-m", "changebroker.cli", "replay", "--master", master),
        *("--out", str(out), "--broker-url", stack.broker_url),
        *("--kafka-bootstrap", stack.kafka_bootstrap, "--prefix", stack.prefix),
        *("--bridge-name", stack.prefix),
    ]
    with open(log, "ab") as output:
        done = subprocess.run(
            command,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, **LOOPBACK_ENV},
            timeout=600,
        )
    assert done.returncode == 0, log.read_text()[-4000:]
    (manifest,) = out.glob("*/manifest.json")
    result: dict[str, Any] = json.loads(manifest.read_text())
    return result


def _rows(out: Path, manifest: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    folder = out / manifest["snapshot_id"]
    tables = {}
    for name, table in manifest["tables"].items():
        rows = ds.dataset(folder / table["path"], format="parquet").to_table().to_pylist()
        key = table["primary_key"]
        tables[name] = sorted(rows, key=lambda row: tuple(row[k] for k in key))
    return tables


@pytest.mark.timeout(900)  # a cluster to start and two replays, each with its own JVM
def test_a_standalone_cluster_writes_the_snapshot_local_mode_writes(
    stack: Stack, rebuilt: Rebuilt, tmp_path: Path
) -> None:
    stack.sql(
        "CREATE TABLE orders (id bigint PRIMARY KEY, total numeric(12, 2), note text,"
        " placed timestamptz, paid boolean, _change_selector text DEFAULT 'bridge')"
    )
    stack.sql(
        "CREATE TABLE lines (order_id bigint, line int, qty int,"
        " _change_selector text DEFAULT 'bridge', PRIMARY KEY (order_id, line))"
    )
    # Deletes carry the whole old row, its selector included.
    stack.sql("ALTER TABLE orders REPLICA IDENTITY FULL")
    stack.sql("ALTER TABLE lines REPLICA IDENTITY FULL")
    stack.start_bridge()
    stack.sql(
        "INSERT INTO orders (id, total, note, placed, paid) SELECT g, g * 1.25, 'n' || g,"
        " '2026-01-01'::timestamptz + g * interval '1 minute', g % 2 = 0"
        " FROM generate_series(1, 3000) g"
    )
    stack.sql(
        "INSERT INTO lines (order_id, line, qty) SELECT g % 500, g, g % 7"
        " FROM generate_series(1, 2000) g"
    )
    stack.sql("UPDATE orders SET total = total + 1, paid = NOT paid WHERE id % 3 = 0")
    stack.sql("DELETE FROM orders WHERE id % 10 = 0")
    stack.sql("DELETE FROM lines WHERE line % 4 = 0")
    wait_until(
        lambda: rebuilt.equals_database(["public.orders", "public.lines"]),
        timeout=180,
        what="every change published",
    )

    local = _replay(stack, "local[2]", tmp_path / "local", tmp_path / "replay-local.log")
    with standalone_cluster(tmp_path / "spark") as master:
        cluster = _replay(stack, master, tmp_path / "cluster", tmp_path / "replay-cluster.log")

    assert cluster["cursors"] == local["cursors"]
    assert cluster["changeserver_sequence"] == local["changeserver_sequence"] is not None
    assert {t: e["rows"] for t, e in cluster["tables"].items()} == {
        "public.orders": 2700,
        "public.lines": 1500,
    }
    assert {t: e["rows"] for t, e in local["tables"].items()} == {
        t: e["rows"] for t, e in cluster["tables"].items()
    }
    assert _rows(tmp_path / "cluster", cluster) == _rows(tmp_path / "local", local)
    assert "spark://" in (tmp_path / "replay-cluster.log").read_text()
