"""A garbage collection that starts while prometheus_client holds its lock (a worker making
a labelled child) does not hang the worker: collections are counted at the next request."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from changebroker.metrics_files import WorkerFiles

WORKER = """
import gc
from prometheus_client import Counter
from changebroker import metrics
gc.set_threshold(5)  # a collection every few allocations, inside the lock too
counter = Counter("t_made_total", "Children made.", ["n"])
for n in range(2000):
    counter.labels(str(n)).inc()
    cycles = [[] for _ in range(3)]
    for cycle in cycles:
        cycle.append(cycle)
metrics.observe_request({"method": "GET"}, 200, 0.1)
"""


def test_collections_inside_prometheus_clients_lock_are_counted_later(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WORKER],
        env={"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
        timeout=60,
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    families = {f.name: f for f in text_string_to_metric_families(WorkerFiles(tmp_path).text())}
    assert sum(s.value for s in families["python_gc_collections"].samples) > 100
    assert len(families["t_made"].samples) == 2000
