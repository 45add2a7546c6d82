"""registry (see README)."""
