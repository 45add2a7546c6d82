"""A Spark standalone cluster on this machine: one master and one worker, from the Spark
distribution inside the pyspark package (``bin/spark-class`` and its ``jars/``)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from changebroker.stack.processes import free_port, wait_until

# Everything binds and advertises loopback: the driver, the master, the worker, executors.
LOOPBACK_ENV = {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_HOSTNAME": "127.0.0.1"}


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _master_state(webui: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"{webui}/json/", timeout=5) as response:
            state: dict[str, Any] = json.load(response)
            return state
    except (OSError, ValueError):
        return {}


@contextlib.contextmanager
def standalone_cluster(work: Path, *, cores: int = 1, memory: str = "2g") -> Iterator[str]:
    """Yields the master's URL once the worker has registered; stops both at the end."""
    home = spark_home()
    env = {**os.environ, **LOOPBACK_ENV, "SPARK_HOME": str(home)}
    master_port, master_ui, worker_port, worker_ui = (free_port() for _ in range(4))
    master_url = f"spark://127.0.0.1:{master_port}"
    webui = f"http://127.0.0.1:{master_ui}"
    work.mkdir(parents=True, exist_ok=True)
    spark_class = str(home / "bin" / "spark-class")
    commands = {
        "master": [
            *(spark_class, "org.apache.spark.deploy.master.Master"),
            *("--host", "127.0.0.1", "--port", str(master_port), "--webui-port", str(master_ui)),
        ],
        "worker": [
            *(spark_class, "org.apache.spark.deploy.worker.Worker", master_url),
            *("--host", "127.0.0.1", "--port", str(worker_port), "--webui-port", str(worker_ui)),
            *("--cores", str(cores), "--memory", memory, "--work-dir", str(work / "worker")),
        ],
    }
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for name, argv in commands.items():
            with open(work / f"{name}.log", "ab") as log:
                processes.append(
                    subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
                )
            if name == "master":
                wait_until(
                    lambda: bool(_master_state(webui)) or processes[0].poll() is not None,
                    timeout=120,
                    what=f"the Spark master at {webui} (see {work / 'master.log'})",
                )
        wait_until(
            lambda: (
                _master_state(webui).get("aliveworkers", 0) >= 1
                or any(p.poll() is not None for p in processes)
            ),
            timeout=120,
            what=f"a Spark worker to register (see {work / 'worker.log'})",
        )
        for name, process in zip(commands, processes, strict=True):
            if process.poll() is not None:
                log_text = (work / f"{name}.log").read_text()[-3000:]
                raise RuntimeError(f"the Spark {name} exited {process.returncode}: {log_text}")
        yield master_url
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in reversed(processes):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
