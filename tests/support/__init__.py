"""Helpers the tests share: where the real services come from, and running our apps."""
