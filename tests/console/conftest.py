"""The console tests' fixtures: the console on the bridge tests' stack, and a browser
(tests/support/console.py)."""

from tests.support.bridge_stack import make_stack, rebuilt, stack
from tests.support.console import browser, console_url, page

__all__ = ["browser", "console_url", "make_stack", "page", "rebuilt", "stack"]
