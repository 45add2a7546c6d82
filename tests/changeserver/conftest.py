"""The changeserver tests' fixtures: a changeserver in this process (tests/support/)."""

from tests.support.changeserver import cs, make_server

__all__ = ["cs", "make_server"]
