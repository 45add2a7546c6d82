"""The local stack: real Postgres, Kafka and Spark started by the project itself.

Used by ``changebroker up`` and by the test fixtures on hosts without a
Docker engine. Everything lives under one state folder (``.state/`` in the
checkout by default): data, logs, pid files and the Maven-resolved jars.
"""
