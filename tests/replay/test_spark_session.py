"""The Spark driver JVM the project starts (replay/spark.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_the_driver_collects_garbage_for_throughput(spark: SparkSession) -> None:
    """The parallel collector, not the JVM's default G1 (docs/performance.md, "Replay")."""
    management = spark.sparkContext._jvm.java.lang.management  # type: ignore[union-attr]
    collectors = {
        bean.getName() for bean in management.ManagementFactory.getGarbageCollectorMXBeans()
    }
    assert collectors == {"PS Scavenge", "PS MarkSweep"}
