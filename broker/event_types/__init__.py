"""Event types: the schema registry half of Nakadi.

``rules.py`` what an EventType body may say, ``effective_schema.py`` the schema events are
validated against, ``store.py`` event types in Postgres (schemas as registry subjects),
``topics.py`` the Kafka topic behind each event type, ``api.py`` ``/event-types``,
``examples.py`` the manual's example event type.
"""
