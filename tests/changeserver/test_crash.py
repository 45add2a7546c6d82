"""SIGKILL during a write burst, several times: served changes == committed rows, in order."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import psycopg

from changebroker.stack.processes import wait_until
from changebroker.stack.run import changeserver_process


class Writer(threading.Thread):
    """Commits rows in transactions of 1 to 5 rows, recording ids in commit order."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.committed: list[int] = []
        self.done = threading.Event()

    def run(self) -> None:
        next_id = 0
        with psycopg.connect(self.dsn) as conn:
            while not self.done.is_set():
                ids = list(range(next_id, next_id + 1 + next_id % 5))
                for row_id in ids:
                    conn.execute("INSERT INTO items VALUES (%s, 'x', 'burst')", (row_id,))
                conn.commit()
                self.committed.extend(ids)
                next_id = ids[-1] + 1


def _served(url: str) -> list[dict[str, object]]:
    changes: list[dict[str, object]] = []
    since = "0.0.0"
    while True:
        body = httpx.get(
            f"{url}/changes", params={"scope": "burst", "since": since, "limit": 100000}
        ).json()
        changes += body["changes"]
        if not body["changes"]:
            return changes
        since = body["changes"][-1]["sequence"]


def _last(url: str) -> str:
    params: dict[str, str | int] = {"scope": "burst", "limit": 0}
    return str(httpx.get(f"{url}/changes", params=params).json()["lastSequence"])


def test_sigkill_restarts_during_a_burst(
    pg_dsn: str, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, name text, _change_selector text)")
    process, port, mgmt = changeserver_process(pg_dsn, tmp_path, unique_name("crash"))
    url = f"http://127.0.0.1:{port}"
    server = process.start()
    writer = Writer(pg_dsn)
    writer.start()
    try:
        for _ in range(3):
            seen = _last(url)

            # Kill only once the server is mid-burst: it has stored more since it started.
            def stored_more(seen: str = seen) -> bool:
                return _last(url) != seen

            wait_until(stored_more, timeout=60, what="ingest")
            server.kill()
            server.start()
        writer.done.set()
        writer.join(timeout=60)
        expected = writer.committed
        wait_until(lambda: len(_served(url)) >= len(expected), timeout=60, what="catching up")
        served = _served(url)
        assert [int(c["newRow"]["id"]["value"]) for c in served] == expected  # type: ignore[index]
        sequences = [(c["commitSequence"], c["commitIndex"]) for c in served]
        assert sequences == sorted(set(sequences))
        # The management port alone answers /health; the API port alone /changes.
        assert httpx.get(f"{url}/health").status_code == 404
        assert httpx.get(f"http://127.0.0.1:{mgmt}/changes?scope=a").status_code == 404
    finally:
        writer.done.set()
        server.stop()
