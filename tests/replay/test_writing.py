"""Removing what killed runs left: only directories that are provably a dead run's (the lock
file, nobody holding it, no manifest); a run still writing, a published snapshot and a
directory that is not ours stay."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from changebroker.replay import writing
from changebroker.replay.snapshots import MANIFEST


def _sweep_elsewhere(out: Path) -> list[str]:
    """``sweep`` from another process, as the next run does (a process never conflicts with
    its own POSIX locks)."""
    code = (
        "import sys; from pathlib import Path; from changebroker.replay.writing import sweep;"
        " print('\\n'.join(p.name for p in sweep(Path(sys.argv[1]))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(out)], capture_output=True, text=True, check=True
    )
    return done.stdout.split()


def _nothing_elsewhere(path: Path) -> writing.Release:
    return lambda: None


def test_only_dead_runs_are_removed(tmp_path: Path) -> None:
    out = tmp_path / "snapshots"
    published = out / "20261123T100000000Z-aaaaaa"
    published.mkdir(parents=True)
    (published / MANIFEST).write_text("{}")
    foreign = out / "20261123T100000001Z-bbbbbb"  # no lock file: not provably ours
    (foreign / "tables").mkdir(parents=True)

    live = out / "20261123T100000002Z-cccccc"
    with writing.writing(live, _nothing_elsewhere):
        assert (live / writing.LOCK).is_file()
        (live / "tables" / "public.t").mkdir(parents=True)
        assert _sweep_elsewhere(out) == []
        # Dead: its lock file exists but nobody holds it (what a SIGKILL leaves).
        dead = out / "20261123T100000003Z-dddddd"
        (dead / "tables" / "public.t").mkdir(parents=True)
        (dead / writing.LOCK).touch()
        assert _sweep_elsewhere(out) == [dead.name]
        (live / MANIFEST).write_text("{}")  # the body publishes
    assert not (live / writing.LOCK).exists()
    assert sorted(d.name for d in out.iterdir()) == [published.name, foreign.name, live.name]

    failed = out / "20261123T100000004Z-eeeeee"
    with pytest.raises(RuntimeError), writing.writing(failed, _nothing_elsewhere):
        raise RuntimeError("a table failed")
    assert not failed.exists()
    assert _sweep_elsewhere(out) == []
