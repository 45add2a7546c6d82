"""The faults the campaign injects, each an ``inject`` that returns a ``heal``.

Processes: SIGKILL (the supervisor starts it again), SIGSTOP then SIGCONT (frozen, then
thawed: Postgres with every backend), SIGTERM (it must drain and exit within a bound).
Links: cut, slowed or black-holed through the fault proxy. The replication slot dropped or
invalidated behind the changeserver's back. The change log's filesystem filled up.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from changebroker.chaos.proxy import BLACKHOLE, CUT, PASS, SLOW, Proxies
from changebroker.stack.processes import pid_alive, wait_until

Heal = Callable[[], None]


def family(pid: int) -> list[int]:
    """``pid`` and its children (a postmaster and its backends)."""
    found = [pid]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def kill(pid: int) -> Heal:
    os.kill(pid, signal.SIGKILL)
    return lambda: None


def freeze(pid: int, whole_family: bool = False) -> Heal:
    frozen = family(pid) if whole_family else [pid]
    for each in frozen:
        _signal(each, signal.SIGSTOP)

    def thaw() -> None:
        for each in frozen:
            _signal(each, signal.SIGCONT)

    return thaw


def terminate(pid: int, bound: float) -> float:
    """SIGTERM ``pid``; seconds until it exited (``bound`` plus a little if it did not)."""
    started = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not pid_alive(pid), timeout=bound + 5, what=None)
    return time.monotonic() - started


def link(proxies: Proxies, name: str, mode: str, delay: float = 0.0) -> Heal:
    assert mode in (CUT, SLOW, BLACKHOLE)
    proxies.set(name, mode, delay)
    return lambda: proxies.set(name, PASS)


def drop_slot_behind(dsn: str, slot: str) -> None:
    """End the slot's walsender and drop the slot before its reader reconnects."""

    def dropped() -> bool:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
                " WHERE slot_name = %s AND active_pid IS NOT NULL",
                (slot,),
            )
            try:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            except psycopg.errors.ObjectInUse:
                return False  # it reconnected first: end it again
            except psycopg.errors.UndefinedObject:
                return True
            return True

    wait_until(dropped, timeout=30, what=f"slot {slot} dropped")


def invalidate_slot(dsn: str, slot: str, reader_pid: int) -> None:
    """Make Postgres invalidate ``slot`` as ``max_slot_wal_keep_size`` does: its reader
    frozen, the limit lowered, WAL written past it, a checkpoint."""
    thaw = freeze(reader_pid)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
            conn.execute("SELECT pg_reload_conf()")
            try:
                conn.execute("CREATE TABLE IF NOT EXISTS chaos_wal (x int)")
                for _ in range(4):
                    conn.execute("INSERT INTO chaos_wal VALUES (1)")
                    conn.execute("SELECT pg_switch_wal()")
                conn.execute("CHECKPOINT")
                query = "SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s"
                status = conn.execute(query, (slot,)).fetchone()
                if status != ("lost",):
                    raise RuntimeError(f"slot {slot} not invalidated: wal_status {status}")
            finally:
                conn.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
                conn.execute("SELECT pg_reload_conf()")
    finally:
        thaw()


def fill_disk(folder: Path) -> Heal:
    """A file taking every free block of ``folder``'s filesystem; heal deletes it."""
    filler = folder / "chaos-filler"
    # Unbuffered: a full disk fails a write inside the loop, never the close after it.
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * (1 << 20))
                out.flush()
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
    return lambda: filler.unlink(missing_ok=True)


def _signal(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # gone already: nothing to stop
        os.kill(pid, signum)
