"""The ``changebroker`` command run as a user runs it: a child process, its output kept."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def changebroker(
    env: dict[str, str], *args: str, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "changebroker.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def status(env: dict[str, str], timeout: float = 600) -> dict[str, Any]:
    """``changebroker status --json``, which must succeed."""
    done = changebroker(env, "status", "--json", timeout=timeout)
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found
