"""The bridge: every committed row change from the changeserver's ``/changes`` becomes a
data-change event of its table's event type, exactly once (events and position in one Kafka
transaction), with the table's schema registered and evolved; and the outbox.

``bridge.py`` the loop, ``session.py`` one session's connections, ``position.py`` the
position record, ``units.py`` units and stops, ``schemas.py`` the schemas in force,
``snapshot_runs.py`` and ``snapshots.py`` existing rows as ``S`` events woven into the
stream, ``data_events.py``, ``table_changes.py``, ``table_events.py`` and ``outbox.py`` the
events of a change, ``tables.py`` catalog, keys, selection and JSON Schema, ``values.py``
Postgres text to JSON, ``event_types.py`` creating and evolving event types,
``transactions.py`` the transactional producer and the position topic, ``main.py`` the CLI
and the HTTP face (health, status, metrics, resume).
"""
