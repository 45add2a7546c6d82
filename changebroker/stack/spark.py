"""A SparkSession with the Kafka connector and Delta Lake: ``local[*]`` by default, any cluster
by URL."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from changebroker.stack import maven
from changebroker.stack.state import REPO_ROOT, StateDir, default_state_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

POM = REPO_ROOT / "docker" / "local" / "spark-kafka-pom.xml"
# The connector, Delta Lake (``format("delta")``, path-based) and what they need beyond the
# jars pyspark ships.
CONNECTOR_ARTIFACTS = (
    "spark-sql-kafka-0-10_2.13",
    "spark-token-provider-kafka-0-10_2.13",
    "kafka-clients",
    "commons-pool2",
    "delta-spark_4.2_2.13",
    "delta-storage",
)
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def connector_jars(state: StateDir | None = None) -> list[str]:
    state = state or StateDir(default_state_dir())
    jars = maven.resolve_jars(
        POM, state.cache / "spark-kafka-jars", include_artifacts=CONNECTOR_ARTIFACTS
    )
    return [str(j) for j in jars]


def spark_session(
    master: str | None = None, app_name: str = "changebroker", state: StateDir | None = None
) -> SparkSession:
    """A SparkSession that can read and write Kafka (``format("kafka")``) and Delta tables
    (``format("delta")``).

    ``master`` falls back to CHANGEBROKER_SPARK_MASTER, then ``local[*]``.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    master = master or os.environ.get("CHANGEBROKER_SPARK_MASTER") or "local[*]"
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.jars", ",".join(connector_jars(state)))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", DELTA_CATALOG)
        # Delta rebuilds a table's log state in 50 tasks by default: for a replay's few log
        # files that is 50 near-empty tasks on every read and commit (seconds per table).
        .config("spark.databricks.delta.snapshotPartitions", "4")
    )
    if master.startswith("local"):
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    return builder.getOrCreate()
