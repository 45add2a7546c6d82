"""A newcomer's map stays true: every package README's module table names exactly its modules,
and the top README's architecture section points to every package README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

# Package folder -> its sub-packages with a README of their own (listed as a row, not per file).
PACKAGES: dict[str, tuple[str, ...]] = {
    "changebroker": (),
    "changeserver": (),
    "broker": (),
    "bridge": (),
    "registry": (),
    "replay": (),
    "console": (),
}
NAME = re.compile(r"`([\w/]+(?:\.py|/))`")


def _table_names(readme: str) -> set[str]:
    section = readme.split("## Modules", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in NAME.findall(row.split(" | ")[0])}


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_module_table_names_every_module(package: str) -> None:
    folder = REPO_ROOT / package
    own = {
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*.py")
        if path.name != "__init__.py"
        and not any(path.is_relative_to(folder / sub) for sub in PACKAGES[package])
    }
    expected = own | {f"{sub}/" for sub in PACKAGES[package]}
    assert _table_names((folder / "README.md").read_text()) == expected


def test_top_readme_points_to_every_package_readme() -> None:
    section = (REPO_ROOT / "README.md").read_text().split("## Architecture and layout", 1)[1]
    section = section.split("\n## ", 1)[0]
    for package in PACKAGES:
        assert f"]({package}/README.md)" in section, package
    assert "](docs/architecture.md)" in section
    for link in re.findall(r"\]\(([^)#]+)\)", section):
        assert Path(REPO_ROOT / link).exists(), link
