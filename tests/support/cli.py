"""The ``changebroker`` command run as a user runs it: a child process, its output kept, in
the environment of a stack of the test's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from changebroker.stack.processes import free_port
from tests.support import REPO_ROOT

# The ports `up` takes from CHANGEBROKER_<name> variables: our services', then Postgres' and
# Kafka's (unless the stack is pointed at others).
SERVICE_PORTS = (
    "BROKER_PORT",
    "REGISTRY_PORT",
    "CHANGESERVER_PORT",
    "CHANGESERVER_MGMT_PORT",
    "BRIDGE_PORT",
    "CONSOLE_PORT",
)
STACK_PORTS = ("PG_PORT", "KAFKA_PORT", "KAFKA_CONTROLLER_PORT", *SERVICE_PORTS)


def stack_env(state: Path, ports: Iterable[str] = STACK_PORTS) -> dict[str, str]:
    """This process's environment without its CHANGEBROKER_ variables, and a stack of its
    own: every one of ``ports`` free, the state folder ``state``, the shared jar cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHANGEBROKER_")}
    env.update({f"CHANGEBROKER_{name}": str(free_port()) for name in ports})
    env["CHANGEBROKER_STATE_DIR"] = str(state)
    env["CHANGEBROKER_CACHE_DIR"] = str(REPO_ROOT / ".state" / "cache")
    return env


# This checkout's changebroker; an installed one is its console script (``[path]``).
CHECKOUT_PROGRAM = (sys.executable, "-m", "changebroker.cli")


def changebroker(
    env: dict[str, str],
    *args: str,
    timeout: float = 600,
    program: Sequence[str] = CHECKOUT_PROGRAM,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*program, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def status(env: dict[str, str], timeout: float = 600) -> dict[str, Any]:
    """``changebroker status --json``, which must succeed."""
    done = changebroker(env, "status", "--json", timeout=timeout)
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def up_demo(
    env: dict[str, str], program: Sequence[str] = CHECKOUT_PROGRAM, cwd: Path | None = None
) -> None:
    """``up --demo``, which must start the stack and run the whole tour: the replay's
    snapshot served, every step done."""
    up = changebroker(env, "up", "--demo", program=program, cwd=cwd)
    assert up.returncode == 0, up.stdout + up.stderr
    assert "demo failed" not in up.stdout and "== Done." in up.stdout, up.stdout
    assert "GET /snapshots?selector=bridge: 2 demo_orders rows" in up.stdout, up.stdout
