"""broker (see README)."""
