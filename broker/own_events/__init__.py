"""Nakadi's own event types: what the broker did, as events operators can subscribe to."""
