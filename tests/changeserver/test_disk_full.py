"""The change log's filesystem full: ingest stops (not ready), nothing stored is corrupted,
and once space returns every change is served, once, in commit order."""

from __future__ import annotations

import contextlib
import errno
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg

from changebroker.changeserver.server import ChangeServer, Settings
from changebroker.stack.processes import wait_until
from changebroker.stack.run import serve_in_thread
from tests.support.changeserver import TABLE


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` (the tests run as root)."""
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def fill(disk: Path) -> Path:
    """A file taking every free block of ``disk``."""
    filler = disk / "filler"
    # Unbuffered: a full disk fails a write inside the loop, never the close after it.
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError as error:
            assert error.errno == errno.ENOSPC, error
    return filler


def _served(url: str) -> list[int]:
    ids: list[int] = []
    since = "0.0.0"
    while True:
        params: dict[str, str | int] = {"scope": "s", "since": since, "limit": 1000}
        body = httpx.get(f"{url}/changes", params=params, timeout=30).json()
        if not body["changes"]:
            return ids
        ids += [int(c["newRow"]["id"]["value"]) for c in body["changes"]]
        since = body["changes"][-1]["sequence"]


def test_a_full_disk_stops_ingest_and_it_resumes_when_space_returns(
    pg_dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(TABLE)
    # The filler takes all of it, whatever its size; once it goes, the log has room to
    # write the batch that failed again and check its write-ahead log in beside it.
    with small_disk(tmp_path / "disk", "16m") as disk, contextlib.ExitStack() as stack:
        slot = f"disk_{tmp_path.name[-8:]}".lower()
        server = ChangeServer(Settings(dsn=pg_dsn, slot=slot, db_dir=disk / "log"))
        url = stack.enter_context(serve_in_thread(server.api_app))
        wait_until(server.replicator.streaming.is_set, timeout=30, what="replication")

        def write(first: int, count: int) -> None:
            with psycopg.connect(pg_dsn) as conn:
                for start in range(first, first + count, 10):
                    for row in range(start, start + 10):
                        conn.execute(
                            "INSERT INTO items VALUES (%s, repeat('x', 2000), 's')", (row,)
                        )
                    conn.commit()

        write(0, 10)
        wait_until(lambda: len(_served(url)) == 10, timeout=30, what="the first changes")
        filler = fill(disk)
        write(10, 500)  # about 1 MB of changes: more than the log's free pages can hold
        wait_until(
            lambda: httpx.get(f"{url}/ready").status_code == 503,
            timeout=30,
            what="not ready while the disk is full",
        )
        stored = _served(url)
        assert stored == list(range(len(stored))), "a partial or unordered batch was served"
        assert len(stored) < 510

        filler.unlink()
        wait_until(lambda: len(_served(url)) == 510, timeout=60, what="ingest to resume")
        assert _served(url) == list(range(510))
        assert httpx.get(f"{url}/ready").status_code == 200
        check = sqlite3.connect(disk / "log" / "changes.sqlite")
        try:
            assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        finally:
            check.close()
