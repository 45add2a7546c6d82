"""`changebroker up / status / down` as a user runs them, on ports and a state folder of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from changebroker import kafka
from changebroker.services import SERVICE_MODULES
from changebroker.stack.processes import pid_alive
from tests.support import cli


def _processes(status: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """Each part's identity: where it answers and its pid (not its changing progress)."""
    keys = ("dsn", "bootstrap", "url", "pid")
    return {name: tuple(info.get(key) for key in keys) for name, info in status.items()}


# Two demos (each with a Spark replay), the replay as a service, down: about five minutes
# on a loaded two-core machine, the default timeout's whole budget.
@pytest.mark.timeout(900)
def test_up_demo_runs_every_service_idempotently_and_down_stops_them(
    tmp_path: Path,
) -> None:
    env = cli.stack_env(tmp_path / "state")
    try:
        cli.up_demo(env)
        status = cli.status(env)
        for name in SERVICE_MODULES:
            assert pid_alive(status[name]["pid"]), f"{name} is not running after up"
        assert status["snapshot"]["rows"] >= 2, status["snapshot"]
        assert status["postgres"]["dsn"].endswith(f":{env['CHANGEBROKER_PG_PORT']}/changebroker")
        assert status["kafka"]["bootstrap"] == f"127.0.0.1:{env['CHANGEBROKER_KAFKA_PORT']}"
        with psycopg.connect(status["postgres"]["dsn"]) as conn:
            assert conn.execute("SHOW wal_level").fetchone() == ("logical",)
        kafka.wait_until_ready(status["kafka"]["bootstrap"], timeout=30)
        # The console, started last, sees every service up through their HTTP APIs.
        overview = httpx.get(status["console"]["url"] + "/", timeout=30)
        assert overview.status_code == 200
        assert "no answer from" not in overview.text and "failing" not in overview.text
        assert overview.text.count('class="stage ok"') == 5, overview.text

        second = cli.changebroker(env, "up", "--demo")
        assert second.returncode == 0, second.stdout + second.stderr
        assert "== Done." in second.stdout, second.stdout
        # The registry's refusal comes with the document that shows it.
        assert 'shown by {"id": ""}: version 1 takes it' in second.stdout, second.stdout
        assert _processes(cli.status(env)) == _processes(status)  # nothing restarted

        # The replay as a service: started by up, its pid in status, stopped by down.
        scheduled = cli.changebroker(env, "up", "--replay-every", "1h")
        assert scheduled.returncode == 0, scheduled.stdout + scheduled.stderr
        status = cli.status(env)
        assert pid_alive(status["replay"]["pid"]), status

        stopped = cli.changebroker(env, "down")
        assert stopped.returncode == 0, stopped.stderr
        assert "postgres" in stopped.stdout and "kafka" in stopped.stdout
        assert cli.status(env) == {}
        for name, info in status.items():
            if "pid" in info:
                assert not pid_alive(info["pid"]), f"{name} still runs after down"
    finally:
        purged = cli.changebroker(env, "down", "--purge")
    assert purged.returncode == 0, purged.stderr
    assert not (tmp_path / "state" / "data").exists()
