"""Publishing: ``POST /event-types/{name}/events`` into Kafka.

``api.py`` the endpoint and the per-event pipeline, ``partitioning.py`` which partition an
event goes to, ``enrichment.py`` the metadata the broker writes, ``producer.py`` the Kafka
producer.
"""
