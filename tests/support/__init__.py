"""Helpers the tests share, imported from here; conftest.py files only name the fixtures.

``services.py`` where Postgres and Kafka come from (our apps run through
changebroker/stack/run.py, as the benchmarks run them), ``bridge_stack.py`` the whole
stack of one test (changeserver, registry, broker, bridge) and a consumer rebuilding its
tables, ``changeserver.py`` a changeserver in this process, ``console.py`` the console and
a browser, ``event_types.py`` event type bodies, ``replay_snapshots.py`` reading replay
snapshots back, ``snapshots.py`` writing them, ``raw_http.py`` HTTP below httpx,
``spark_cluster.py`` a standalone Spark cluster, ``cli.py`` the ``changebroker``
command as a child process.
"""

from pathlib import Path

# The checkout the tests run from.
REPO_ROOT = Path(__file__).resolve().parents[2]
# The API contracts responses are checked against (docs/specs/README.md).
SPECS = REPO_ROOT / "docs" / "specs"
