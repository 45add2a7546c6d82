"""A snapshot directory while a run writes it, and removing the ones killed runs left behind.

A run holds a lock on ``<out>/<snapshot id>/.writing`` from the moment the directory exists
until it has published the manifest or given up: a shared POSIX lock, taken by the replay
process and by its Spark driver JVM (which writes the files). The lock file appears only once
it is locked (made under another name, then renamed), so a directory with the file, without
``manifest.json`` and whose lock nobody holds any more is provably a dead run's: the next run
removes it. A directory without the file is not provably ours and is left alone, as is a
published snapshot.

A driver JVM whose replay process was killed exits by itself (it reads its stdin to EOF), but
only after its shutdown has waited for the running tasks, which took minutes on a loaded
machine: all that time its lock kept the next run from removing the directory. So while it
holds the lock, a watcher process kills it the moment the replay process dies.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from changebroker.replay.snapshots import MANIFEST

LOCK = ".writing"
_MAX_LOCK_LENGTH = 0x7FFF_FFFF_FFFF_FFFF  # Java's whole-file lock range


def _locked_by_someone(error: OSError) -> bool:
    return error.errno in (errno.EAGAIN, errno.EACCES)


def sweep(out: Path) -> list[Path]:
    """Remove the directories of runs that were killed (or failed without cleaning up) while
    writing; the removed ones."""
    if not out.is_dir():
        return []
    removed = []
    for directory in sorted(d for d in out.iterdir() if d.is_dir()):
        lock = directory / LOCK
        if (directory / MANIFEST).exists() or not lock.is_file():
            continue
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            continue  # its run just published or gave up
        try:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as busy:
                if _locked_by_someone(busy):
                    continue  # still being written
                raise
            if not (directory / MANIFEST).exists():
                shutil.rmtree(directory)
                removed.append(directory)
        finally:
            os.close(fd)
    return removed


Release = Callable[[], None]


@contextlib.contextmanager
def writing(directory: Path, hold_elsewhere: Callable[[Path], Release]) -> Iterator[Path]:
    """Make ``directory`` and hold its lock (here, and by ``hold_elsewhere``, which locks the
    file in another process and returns how to let go) while the body writes it. The body
    publishes the manifest; if it raises instead, the directory is removed."""
    directory.mkdir(parents=True)
    published = False
    try:
        claim = directory / f"{LOCK}.new"
        fd = os.open(claim, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        release_elsewhere: Release | None = None
        try:
            fcntl.lockf(fd, fcntl.LOCK_SH)
            release_elsewhere = hold_elsewhere(claim)
            os.rename(claim, directory / LOCK)
            yield directory
            published = True
            (directory / LOCK).unlink()
        finally:
            if release_elsewhere is not None:
                release_elsewhere()
            os.close(fd)
    except BaseException:
        if not published:
            # Not a snapshot without a manifest anyway; removing it just saves the space.
            shutil.rmtree(directory, ignore_errors=True)
        raise


# Reads one line from this process; EOF first means this process died: kill the JVM.
_WATCHER = 'read -r _ || kill -KILL "$1"'


def hold_in_jvm(jvm: object) -> Callable[[Path], Release]:
    """``hold_elsewhere`` for a Spark driver: a shared lock taken through Py4J by the JVM,
    which a watcher kills if this process dies before letting go."""

    def hold(path: Path) -> Release:
        pid = jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[attr-defined]
        # Its own session: a Ctrl-C meant for the replay does not end the watcher first.
        watcher = subprocess.Popen(
            ["sh", "-c", _WATCHER, "watcher", str(pid)],
            stdin=subprocess.PIPE,
            start_new_session=True,
        )
        file = jvm.java.io.RandomAccessFile(str(path), "rw")  # type: ignore[attr-defined]
        try:
            lock = file.getChannel().lock(0, _MAX_LOCK_LENGTH, True)
        except BaseException:
            watcher.communicate(b"\n")
            file.close()
            raise

        def release() -> None:
            lock.release()
            file.close()
            watcher.communicate(b"\n")

        return release

    return hold
