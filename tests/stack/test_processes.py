"""The local stack's process bookkeeping: which recorded pids count as running."""

from __future__ import annotations

import subprocess
import sys

from changebroker.stack.processes import pid_alive, process_state, wait_until

# A parent that forks a child which exits at once, and never reaps it: the child stays a
# zombie of that parent (not of the test), as a SIGKILLed service is until its parent reaps it.
_ORPHAN_ZOMBIE = """
import os, sys, time
pid = os.fork()
if pid == 0:
    os._exit(0)
print(pid, flush=True)
sys.stdin.read()
"""


def test_a_zombie_that_is_not_our_child_counts_as_gone() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN_ZOMBIE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        zombie = int(parent.stdout.readline())
        wait_until(lambda: process_state(zombie) == "Z", timeout=10, what=f"{zombie} to exit")
        assert not pid_alive(zombie), f"zombie {zombie} (state Z) counted as running"
        assert pid_alive(parent.pid), "a live process counted as gone"
    finally:
        parent.communicate("")


def test_our_own_exited_child_is_reaped_and_counts_as_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_until(lambda: process_state(child.pid) == "Z", timeout=10, what=f"{child.pid} to exit")
    assert not pid_alive(child.pid)
