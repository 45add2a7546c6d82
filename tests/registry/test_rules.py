"""The compatibility rules are one table: every rule has its entry, and the README lists them."""

from __future__ import annotations

import re

from changebroker.registry.compat import RULES, Rule
from tests.support import REPO_ROOT

ROW = re.compile(r"^\| `([A-Za-z_-]+)` \| ([^|]+) \| (.+) \|$")


def test_every_rule_is_described() -> None:
    assert set(RULES) == set(Rule)
    for rule, info in RULES.items():
        assert info.formats in ("any", "JSON Schema", "Avro", "Protobuf"), rule
        assert info.description and not info.description.endswith("."), rule


def test_the_readme_lists_the_table() -> None:
    readme = (REPO_ROOT / "registry" / "README.md").read_text()
    listed = [ROW.match(line) for line in readme.splitlines()]
    rows = {m.group(1): (m.group(2), m.group(3)) for m in listed if m}
    assert rows == {rule.value: (info.formats, info.description) for rule, info in RULES.items()}
