"""The local stack's supervisor: what dies is started again, with backoff, shown in status."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from changebroker.stack.processes import answers, pid_alive, wait_until
from tests.support import cli


def _changebroker(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return cli.changebroker(env, *args, timeout=300)


def _status(env: dict[str, str]) -> dict[str, Any]:
    return cli.status(env, timeout=300)


def test_a_killed_service_is_restarted_with_backoff_and_down_stops_the_supervisor(
    tmp_path: Path, pg_dsn: str, kafka_bootstrap: str
) -> None:
    env = cli.stack_env(tmp_path / "state", cli.SERVICE_PORTS)
    env["CHANGEBROKER_PG_DSN"] = pg_dsn
    env["CHANGEBROKER_KAFKA_BOOTSTRAP"] = kafka_bootstrap
    try:
        started = _changebroker(env, "up")
        assert started.returncode == 0, started.stdout + started.stderr
        status = _status(env)
        assert pid_alive(status["supervisor"]["pid"]), status
        first = status["registry"]["pid"]
        registry = status["registry"]["url"] + "/health"

        # Killed twice in a row: restarted each time, the second after a longer backoff.
        for restarts in (1, 2):
            killed = _status(env)["registry"]["pid"]
            os.kill(killed, signal.SIGKILL)

            def restarted(killed: int = killed, restarts: int = restarts) -> bool:
                now = _status(env)
                record = now.get("supervisor", {}).get("parts", {}).get("registry", {})
                running = now.get("registry", {}).get("pid") not in (None, killed)
                return record.get("restarts") == restarts and running and answers(registry)

            wait_until(restarted, timeout=90, what=f"registry restart {restarts}")
        record = _status(env)["supervisor"]["parts"]["registry"]
        assert record["last_exit"] == "killed by SIGKILL", record  # its own child by now
        assert record["backoff"] == 4.0, record  # 1 s, then 2 s, next time 4 s
        assert not pid_alive(first)

        # Stopped before what it watches: nothing comes back after down.
        supervisor = _status(env)["supervisor"]["pid"]
        stopped = _changebroker(env, "down")
        assert stopped.returncode == 0, stopped.stderr
        assert "supervisor" in stopped.stdout and "registry" in stopped.stdout, stopped.stdout
        assert not pid_alive(supervisor)
        assert set(_status(env)) == {"postgres", "kafka"}  # external: they count as running
    finally:
        _changebroker(env, "down")
