"""A short fault campaign, as CI runs it (``.ci/run`` runs pytest): a fixed seed, a minute of
faults two at a time on a private stack under load (about two minutes in all); any violated
invariant fails it."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

SEED = 7
_CAUSES = ("VIOLATION", "CAMPAIGN FAILED")  # the lines that say why a campaign failed


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
    # Shown in full under the failure (pytest cuts the assertion's message to its first lines).
    print(done.stdout, done.stderr[-5000:], sep="\n")
    report = done.stdout[done.stdout.find("== chaos campaign") :]
    assert done.returncode == 0, _failed(done.stdout, done.stderr)
    assert "violations: 0" in report, report
    injected = sum(int(n) for n in re.findall(r"^\S+\s+(\d+)$", report, re.MULTILINE))
    assert injected >= 3, report  # faults did happen
    checked = re.search(r"^changes checked in /changes\s+(\d+)$", report, re.MULTILINE)
    assert checked is not None and int(checked.group(1)) > 0, report


def _failed(stdout: str, stderr: str) -> str:
    """A failed campaign's output, why it failed first: pytest shows only the first lines of
    a long message. Its violations, the first few (one is printed per lost change, and as
    found and again in the report), or the error that ended it; then the fault timeline and
    recoveries; then the end of stderr (a crash's traceback)."""
    lines = stdout.splitlines()
    causes = list(dict.fromkeys(line for line in lines if line.startswith(_CAUSES)))
    rest = [line for line in lines if not line.startswith(_CAUSES)]
    shown = [*causes[:20], f"({len(causes)} violation or failure lines in all)"]
    return "\n".join([*shown, *rest, stderr[-5000:]])
