"""docs/client.md's runnable example runs as written: a replica of a selector from the
snapshot, then the changes, killed and started again, ends with exactly the table's rows."""

from __future__ import annotations

import json
import random
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from changebroker.stack.processes import wait_until
from tests.support import REPO_ROOT
from tests.support.change_feeds import FULL_OLD_ROWS, WANTED, fence, selector_rows, write
from tests.support.changeserver import MakeServer
from tests.support.snapshots import write_snapshot

DOC = REPO_ROOT / "docs" / "client.md"


def runnable(name: str) -> str:
    """The code block the doc marks ``<!-- runnable: name -->``."""
    found = re.search(
        rf"<!-- runnable: {re.escape(name)} -->\n```python\n(.*?)```", DOC.read_text(), re.S
    )
    assert found, f"docs/client.md has no runnable {name}"
    return found.group(1)


def _replica(path: Path) -> dict[int, str | None]:
    try:
        with sqlite3.connect(path) as conn:
            rows = conn.execute("SELECT row FROM rows WHERE tbl = 'public.items'").fetchall()
    except sqlite3.OperationalError:  # not made yet
        return {}
    return {(row := json.loads(text))["id"]: row["name"] for (text,) in rows}


def test_the_replica_example_follows_a_selector_across_a_kill(
    make_server: MakeServer, tmp_path: Path
) -> None:
    script = tmp_path / "replica.py"
    script.write_text(runnable("replica.py"))
    snapshots = tmp_path / "snapshots"
    cs = make_server(snapshots_dir=snapshots)
    cs.sql(FULL_OLD_ROWS)
    next_id = write(cs.dsn, random.Random(17), 30)
    write_snapshot(snapshots, cs.dsn, ["public.items"], fence(cs, -1))
    replica = tmp_path / "replica.sqlite"
    args = [sys.executable, str(script), cs.url, WANTED, str(replica)]

    for run in range(2):
        rng = random.Random(run)
        with open(tmp_path / "replica.log", "ab") as log:
            process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
        next_id = write(cs.dsn, rng, 20, next_id)
        wait_until(
            lambda: _replica(replica) == selector_rows(cs.dsn),
            timeout=60,
            what="the replica to equal the table",
        )
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    output = (tmp_path / "replica.log").read_text()
    assert output.count("snapshot ") == 1, output  # the second run resumed from its position
    assert "starting from the newest snapshot" in output and re.search(
        r"starting from \d", output
    ), output
