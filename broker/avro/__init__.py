"""Nakadi's Avro: the envelope batches are published and streamed in, and event payloads."""
