"""The replay tests' fixtures: the bridge tests' stack (tests/support/bridge_stack.py)."""

from tests.support.bridge_stack import make_stack, stack

__all__ = ["make_stack", "stack"]
