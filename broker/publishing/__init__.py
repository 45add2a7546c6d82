"""Publishing: ``POST /event-types/{name}/events`` into Kafka.

``api.py`` the endpoint, ``pipeline.py`` the per-event pipeline (the bridge's too),
``partitioning.py`` which partition an event goes to, ``enrichment.py`` the metadata the
broker writes, ``producer.py`` the Kafka producer.
"""
