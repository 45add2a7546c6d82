"""changeserver (see README)."""
