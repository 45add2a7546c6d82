"""Low-level reading: event streams by offset, partitions and cursor operations.

``api.py`` the endpoints, ``event_stream.py`` one stream's Kafka consumer and its batches,
``cursors.py`` offsets, cursors and their arithmetic, ``watermarks.py`` Kafka watermarks.
"""
