"""``python -m bench`` runs every module it discovers: each must be a benchmark (a ``main``),
or the whole run ends failed."""

from __future__ import annotations

import ast

from bench.__main__ import BENCH_DIR, discover


def test_every_discovered_module_is_a_benchmark() -> None:
    names = discover()
    assert "replay" in names and "services" not in names
    for name in names:
        tree = ast.parse((BENCH_DIR / f"{name}.py").read_text())
        functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert "main" in functions, f"bench/{name}.py has no main(): not a benchmark"
