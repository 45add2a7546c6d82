"""Storages and timelines: the Kafka clusters events live in, and the topics an event type's
events have lived in, in order (Nakadi's timelines); repartitioning. See broker/README.md
"Storages, timelines and repartitioning"."""
