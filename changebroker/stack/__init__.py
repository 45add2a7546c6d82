"""The local stack: real Postgres, Kafka and Spark started by the project itself.

Used by ``changebroker up`` and by the test fixtures on hosts without a
Docker engine. Everything lives under one state folder (``.state/`` of the checkout
when run from one, else the user's XDG state folder;
``changebroker.state.default_state_dir``): data, logs, pid files and the Maven-resolved jars.
"""
