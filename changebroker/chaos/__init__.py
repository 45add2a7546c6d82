"""The fault campaign: ``changebroker chaos``."""
