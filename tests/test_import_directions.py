"""Imports run one way (docs/architecture.md, "Which part imports which"): the shared library
imports no service and no tool, a service imports no tool, and no two modules import each other.
Every module's imports are read from its source, so a new module is held to the same rule; and
no module outside the broker names the broker's tables."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

# The services' folders; changebroker/<folder> links to each, so its modules are
# changebroker.<folder>.
FOLDERS = ("changeserver", "broker", "bridge", "registry", "replay", "console")
SERVICES = tuple(f"changebroker.{folder}" for folder in FOLDERS)
# The command and the local stack: they start, drive and break the services, so they sit
# above them.
TOOLS = ("changebroker.cli", "changebroker.demo", "changebroker.stack", "changebroker.chaos")
PACKAGES = ("changebroker", *FOLDERS)


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    if parts[0] != "changebroker":
        parts = ("changebroker", *parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for package in PACKAGES
        for path in sorted((REPO_ROOT / package).rglob("*.py"))
    }


def _type_checking_blocks(tree: ast.AST) -> set[ast.AST]:
    """The imports under ``if TYPE_CHECKING:``: read by the type checker, never run."""
    return {
        inner
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for statement in node.body
        for inner in ast.walk(statement)
    }


def _imported(module: str, path: Path, *, typing_too: bool) -> Iterator[str]:
    """Every module the source names in an import, at any depth (a function's lazy import
    counts: it runs the same code)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    skipped = set() if typing_too else _type_checking_blocks(tree)
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


MODULES = _modules()


def _imports(*, typing_too: bool) -> dict[str, set[str]]:
    return {
        module: {name for name in _imported(module, path, typing_too=typing_too) if name in MODULES}
        for module, path in MODULES.items()
    }


IMPORTS = _imports(typing_too=True)
RUN_IMPORTS = _imports(typing_too=False)


def _within(module: str, roots: tuple[str, ...]) -> bool:
    return any(module == root or module.startswith(f"{root}.") for root in roots)


def _layer(module: str) -> str:
    if _within(module, TOOLS):
        return "tool"
    if _within(module, SERVICES):
        return "service"
    return "shared"


def test_the_walk_sees_every_part() -> None:
    layers = {_layer(module) for module in MODULES}
    assert layers == {"tool", "service", "shared"}
    # A lazy import inside a function counts; one for the type checker only does not run.
    assert "changebroker.replay.job" in IMPORTS["changebroker.demo"]
    assert "changebroker.client.changes" in IMPORTS["changebroker.client.snapshots"]
    assert "changebroker.client.changes" not in RUN_IMPORTS["changebroker.client.snapshots"]


@pytest.mark.parametrize("layer", ["shared", "service"])
def test_nothing_imports_a_layer_above_it(layer: str) -> None:
    above = {"shared": ("service", "tool"), "service": ("tool",)}[layer]
    wrong = sorted(
        f"{module} imports {name}"
        for module, names in IMPORTS.items()
        if _layer(module) == layer
        for name in names
        if _layer(name) in above
    )
    assert wrong == []


def test_no_two_modules_import_each_other() -> None:
    """A package importing its own modules (its ``__init__`` naming what it offers) is how
    packages work, not a circle."""
    circles = sorted(
        f"{module} <-> {name}"
        for module, names in RUN_IMPORTS.items()
        for name in names
        if module < name and module in RUN_IMPORTS[name] and not name.startswith(f"{module}.")
    )
    assert circles == []


def _tables_of(part: str) -> list[str]:
    """The tables ``sql/<part>/`` creates."""
    sql = "".join(path.read_text() for path in (REPO_ROOT / "sql" / part).glob("*.sql"))
    return sorted(set(re.findall(rf"CREATE TABLE (?:IF NOT EXISTS )?({part}_\w+)", sql)))


# The broker's tables, as sql/broker/ creates them.
BROKER_TABLES = _tables_of("broker")


def test_only_the_broker_names_its_tables() -> None:
    """A part reads the broker's metadata through the broker's modules (the publishing
    pipeline, the event type store), never by SQL of its own: a change to those tables is
    then the broker's alone."""
    assert "broker_event_types" in BROKER_TABLES
    naming = re.compile(rf"\b({'|'.join(BROKER_TABLES)})\b")
    broker = REPO_ROOT / "broker"
    wrong = sorted(
        f"{module} names {found.group(1)}"
        for module, path in MODULES.items()
        if not path.resolve().is_relative_to(broker)
        for found in [naming.search(path.read_text())]
        if found is not None
    )
    assert wrong == []


def test_only_the_registry_writes_its_tables() -> None:
    """The broker keeps each event type's schema versions as registry subjects, in the same
    transaction as the event type, but through the registry's own store
    (``registry.store.register_in`` and its neighbours): no SQL outside ``registry/`` writes a
    registry table, so the registry's invariants (ids without gaps, one id per definition)
    are kept in one place."""
    tables = _tables_of("registry")
    assert "registry_schemas" in tables
    writing = re.compile(
        rf"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|TRUNCATE)\s+({'|'.join(tables)})\b", re.I
    )
    registry = REPO_ROOT / "registry"
    wrong = sorted(
        f"{module} writes {found.group(1)}"
        for module, path in MODULES.items()
        if not path.resolve().is_relative_to(registry)
        for found in [writing.search(path.read_text())]
        if found is not None
    )
    assert wrong == []
