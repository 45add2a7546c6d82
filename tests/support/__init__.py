"""Helpers the tests share: where the real services come from, and running our apps."""

from pathlib import Path

# Copies of the API contracts (../shared/specs), so a clone anywhere can run the tests.
SPECS = Path(__file__).resolve().parents[1] / "specs"
