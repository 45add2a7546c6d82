"""SIGTERM drains the changeserver: a long poll under way is answered at once (with what
there is) instead of being cut at the graceful timeout, and the process exits soon."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psycopg

from changebroker.stack.processes import wait_until
from changebroker.stack.run import changeserver_process
from tests.support.changeserver import TABLE

_REQUEST_TASK = "coro=<RequestResponseCycle.run_asgi()"
BOUND = 8.0  # seconds: well under the 10 s graceful timeout a cut poll would wait for


def test_sigterm_answers_long_polls_and_exits_promptly(
    pg_dsn: str, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(TABLE)
    process, port, _ = changeserver_process(pg_dsn, tmp_path, unique_name("drain"))
    url = f"http://127.0.0.1:{port}"
    server = process.start()
    try:
        answers: list[int] = []
        errors: list[str] = []

        def poll() -> None:
            try:
                params: dict[str, str | int] = {"scope": "nobody", "block": 60}
                answers.append(httpx.get(f"{url}/changes", params=params, timeout=90).status_code)
            except httpx.HTTPError as error:
                errors.append(repr(error))

        polls = [threading.Thread(target=poll) for _ in range(3)]
        for each in polls:
            each.start()
        # Parked: the task dump shows one task per request under way (the dump's own included).
        wait_until(
            lambda: httpx.get(f"{url}/diagnostics/stack").text.count(_REQUEST_TASK) >= 4,
            timeout=30,
            what="three parked long polls",
        )
        assert server.process is not None
        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=30)
        took = time.monotonic() - started
        for each in polls:
            each.join(timeout=30)
        assert errors == [], errors
        assert answers == [200, 200, 200]
        assert took < BOUND, f"took {took:.1f}s to stop"
    finally:
        server.stop()  # a no-op once it exited
