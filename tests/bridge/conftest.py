"""The bridge tests' fixtures: the whole stack per test (tests/support/bridge_stack.py)."""

from tests.support.bridge_stack import make_stack, rebuilt, stack

__all__ = ["make_stack", "rebuilt", "stack"]
