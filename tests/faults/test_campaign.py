"""A short fault campaign, as CI runs it (``.ci/run`` runs pytest): a fixed seed, a minute of
faults two at a time on a private stack under load (about two minutes in all); any violated
invariant fails it."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

SEED = 7


# About two minutes alone; a machine busy with other work has doubled that. The campaign's own
# timeout (below) ends it first, with its output.
@pytest.mark.timeout(960)
def test_a_short_campaign_finds_no_violation() -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "changebroker.cli", "chaos"),
            *("--minutes", "1", "--seed", str(SEED), "--lanes", "2", "--hold", "4"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    report = done.stdout[done.stdout.find("== chaos campaign") :]
    assert done.returncode == 0, _failed(done.stdout, done.stderr)
    assert "violations: 0" in report, report
    injected = sum(int(n) for n in re.findall(r"^\S+\s+(\d+)$", report, re.MULTILINE))
    assert injected >= 3, report  # faults did happen
    checked = re.search(r"^changes checked in /changes\s+(\d+)$", report, re.MULTILINE)
    assert checked is not None and int(checked.group(1)) > 0, report


def _failed(stdout: str, stderr: str) -> str:
    """A failed campaign's output with its violations cut to the first few: one is printed per
    lost change, and a tail of them would hide the fault timeline and recoveries above them."""
    lines = stdout.splitlines()
    violations = [line for line in lines if line.startswith("VIOLATION")]
    rest = [line for line in lines if not line.startswith("VIOLATION")]
    shown = [*violations[:20], f"({len(violations)} violation lines in all)"]
    return "\n".join([*rest, *shown, stderr[-5000:]])
