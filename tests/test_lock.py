"""pyproject.toml's ranges and the lock (requirements/constraints.txt, what scripts/install.sh
and .ci/run install with) agree: every dependency pyproject.toml names, its extras' too, is
pinned to one version its range admits."""

from __future__ import annotations

import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.support import REPO_ROOT

LOCK = REPO_ROOT / "requirements" / "constraints.txt"
_PROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
DEPENDENCIES = [
    Requirement(line)
    for group in (_PROJECT["dependencies"], *_PROJECT["optional-dependencies"].values())
    for line in group
]


def _pins() -> dict[str, Version]:
    lines = [line for line in LOCK.read_text().splitlines() if not line.startswith("#")]
    pins: dict[str, Version] = {}
    for line in lines:
        name, equals, version = line.partition("==")
        assert equals and Version(version), f"the lock pins one version a line: {line!r}"
        pins[canonicalize_name(name)] = Version(version)
    return pins


@pytest.mark.parametrize("requirement", DEPENDENCIES, ids=str)
def test_the_lock_pins_each_dependency_where_its_range_admits(requirement: Requirement) -> None:
    pins = _pins()
    name = canonicalize_name(requirement.name)
    assert name in pins, f"{requirement.name} is not in the lock: run scripts/lock.py"
    assert requirement.specifier.contains(pins[name], prereleases=True), (
        f"the lock has {requirement.name} {pins[name]}, outside pyproject.toml's"
        f" {requirement.specifier}: install a version inside it, then run scripts/lock.py"
    )
