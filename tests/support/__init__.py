"""Helpers the tests share: where the real services come from, and running our apps."""

from pathlib import Path

# The API contracts responses are checked against (docs/specs/README.md).
SPECS = Path(__file__).resolve().parents[2] / "docs" / "specs"
