"""Subscriptions: consumer groups whose streams, commits and cursors live in Postgres.

``store.py`` subscriptions in Postgres, ``stream_api.py`` streams, commits, cursors, resets
and stats, ``rebalance.py`` which stream reads which partition, ``coordination.py`` what
broker processes share through Postgres.
"""
