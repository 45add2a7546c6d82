"""Subscriptions: consumer groups whose streams, commits and cursors live in Postgres.

``store.py`` subscriptions, sessions and cursors in Postgres and the lock every change
takes, ``api.py`` ``/subscriptions`` and ``/subscriptions/{id}``, ``session.py`` one
stream's Kafka consumer and partitions, ``stream_api.py`` streams, commits, cursors,
resets and stats, ``rebalance.py`` which stream reads which partition,
``coordination.py`` what broker processes share through Postgres, ``service.py`` all of
it for one app.
"""
