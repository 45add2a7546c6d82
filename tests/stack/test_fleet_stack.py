"""``changebroker up --changeservers 2``: two changeservers behind HAProxy on the public
changeserver port, each listed by ``status`` with its slot, sequences and readiness; one
marked down and stopped comes back through the supervisor as a new server, seeded from the
other; ``down`` stops them all."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import psycopg

from changebroker.changeserver.sequence import Sequence
from changebroker.stack.processes import pid_alive, wait_until
from tests.support import cli

FLEET = ("changeserver-1", "changeserver-2")


def _status(env: dict[str, str]) -> dict[str, Any]:
    return cli.status(env, timeout=300)


def _slots(dsn: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        query = "SELECT slot_name::text FROM pg_replication_slots WHERE database = %s"
        return {slot for (slot,) in conn.execute(query, (conn.info.dbname,)).fetchall()}


def test_up_runs_a_fleet_that_status_lists_and_the_supervisor_keeps(
    tmp_path: Path, pg_dsn: str, kafka_bootstrap: str
) -> None:
    env = cli.stack_env(tmp_path / "state", cli.SERVICE_PORTS)
    env["CHANGEBROKER_PG_DSN"] = pg_dsn
    env["CHANGEBROKER_KAFKA_BOOTSTRAP"] = kafka_bootstrap
    try:
        started = cli.changebroker(env, "up", "--changeservers", "2", timeout=300)
        assert started.returncode == 0, started.stdout + started.stderr
        status = _status(env)
        public = f"http://127.0.0.1:{env['CHANGEBROKER_CHANGESERVER_PORT']}"
        assert status["loadbalancer"]["changeserver"]["url"] == public
        assert "changeserver" not in status  # the fleet's servers instead of the single one
        servers = {name: status[name] for name in FLEET}
        assert [s["status"]["slot"] for s in servers.values()] == ["changebroker", "changebroker_2"]
        assert all(s["ready"] for s in servers.values()), servers
        assert _slots(pg_dsn) == {"changebroker", "changebroker_2"}
        answer = httpx.get(f"{public}/changes", params={"since": "0.0.0"}, timeout=30)
        assert answer.status_code == 200, answer.text

        # Marked down and stopped: its slot is dropped, the supervisor starts it again, and
        # it seeds its log from the other server before it is ready.
        second = status["changeserver-2"]
        markdown = httpx.get(f"{second['management']}/markdown", timeout=30)
        assert markdown.status_code == 200
        os.kill(second["pid"], signal.SIGTERM)
        wait_until(lambda: not pid_alive(second["pid"]), timeout=30, what="it to exit")

        def back() -> bool:
            now = _status(env)
            record = now.get("supervisor", {}).get("parts", {}).get("changeserver-2", {})
            return record.get("restarts") == 1 and bool(now.get("changeserver-2", {}).get("ready"))

        wait_until(back, timeout=120, what="changeserver-2 restarted and ready")
        status = _status(env)
        # Seeded: the same history as the other, from the same first change. The stack writes
        # all the while (the bridge's watermarks), so both servers' newest changes move: the
        # new one is caught up once it has what the other had a moment before.
        assert len({status[name]["status"]["first_sequence"] for name in FLEET}) == 1, status
        newest = Sequence.parse(status["changeserver-1"]["status"]["last_sequence"])

        def caught_up() -> bool:
            now = _status(env)["changeserver-2"]["status"]
            return Sequence.parse(now["last_sequence"]) >= newest

        wait_until(caught_up, timeout=60, what="the new server at the other's newest change")
        assert _slots(pg_dsn) == {"changebroker", "changebroker_2"}

        stopped = cli.changebroker(env, "down", timeout=300)
        assert stopped.returncode == 0, stopped.stderr
        assert all(name in stopped.stdout for name in (*FLEET, "loadbalancer")), stopped.stdout
        for name in FLEET:
            assert not pid_alive(status[name]["pid"])
    finally:
        cli.changebroker(env, "down", timeout=300)
