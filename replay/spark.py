"""A SparkSession with the Kafka connector and Delta Lake: ``local[*]`` by default, any cluster
by URL.

A Spark driver loads tens of thousands of classes before its first job ends: seconds of
every replay's wall time. When a class archive for this Java, pyspark and jar set exists
(``class_archive``; replay/class_archive.py makes it, ``scripts/install.sh`` runs that),
the driver JVM maps the classes from it (Java's application class data sharing) instead.
A missing or unusable archive only costs that time: the JVM checks it and goes on without.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from changebroker import maven
from changebroker.state import StateDir, default_state_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

POM = maven.pom("spark-kafka-pom.xml")
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
# The JVM's class sharing notes (an archive it cannot use, classes it skips) are not the
# user's business: the archive is an optimization only.
_QUIET_CLASS_SHARING = "-Xlog:cds=off -Xlog:cds+dynamic=off"
# A replay is a batch job: the parallel collector's throughput, not G1's short pauses. G1's
# concurrent threads and write barriers cost a 5M-change replay a fifth of its JVM CPU
# (docs/performance.md, "Replay").
_THROUGHPUT_COLLECTOR = "-XX:+UseParallelGC"


def connector_jars(state: StateDir | None = None) -> list[str]:
    state = state or StateDir(default_state_dir())
    jars = maven.resolve_jars(
        POM, state.cache / "spark-kafka-jars", include_artifacts=CONNECTOR_ARTIFACTS
    )
    return [str(j) for j in jars]


def class_archive(state: StateDir | None = None) -> Path:
    """Where the driver's class archive for this Java, pyspark and jar set is (or would be)."""
    import pyspark

    # The class path is part of what an archive holds: the driver's is pyspark's and these.
    identity = [_java(), pyspark.__version__, "driver class path", *connector_jars(state)]
    key = hashlib.sha256("\n".join(identity).encode()).hexdigest()[:16]
    state = state or StateDir(default_state_dir())
    return state.cache / "spark-class-archive" / f"{key}.jsa"


def _java() -> str:
    """The java spark-submit runs (``$JAVA_HOME/bin/java``, else the one on PATH), and when
    its VM library was installed: an updated JVM refuses an older JVM's archive."""
    home = os.environ.get("JAVA_HOME")
    java = Path(
        os.path.realpath(
            os.path.join(home, "bin", "java") if home else shutil.which("java") or "java"
        )
    )
    vm = java.parent.parent / "lib" / "server" / "libjvm.so"
    return f"{java} {vm.stat().st_mtime_ns if vm.exists() else ''}"


def spark_session(
    master: str | None = None,
    app_name: str = "changebroker",
    state: StateDir | None = None,
    *,
    one_run: bool = False,
    archive_classes_to: Path | None = None,
) -> SparkSession:
    """A SparkSession that can read and write Kafka (``format("kafka")``) and Delta tables
    (``format("delta")``).

    ``master`` falls back to CHANGEBROKER_SPARK_MASTER, then ``local[*]``. The driver uses the
    class archive when there is one; ``archive_classes_to``: instead, write one there of the
    classes it loaded, when its JVM exits. ``one_run``: the session does one job and stops,
    so its JVM compiles with C1 alone (the quick compiler); C2's optimizing compiles cost a
    short run more CPU than they give back (docs/performance.md, "Replay").
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    master = master or os.environ.get("CHANGEBROKER_SPARK_MASTER") or "local[*]"
    archive = class_archive(state)
    if archive_classes_to is not None:
        sharing = f"-XX:ArchiveClassesAtExit={archive_classes_to}"
    elif archive.exists():
        sharing = f"-XX:SharedArchiveFile={archive}"
    else:
        sharing = ""
    compiling = "-XX:TieredStopAtLevel=1" if one_run else ""
    jars = connector_jars(state)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        # Both read when the driver JVM starts (pyspark starts it in client mode, as it
        # must). On the driver's own class path the jars' classes can be archived, and a
        # local run (whose executors are the driver) copies none of them at start.
        .config("spark.driver.extraClassPath", os.pathsep.join(jars))
        .config(
            "spark.driver.extraJavaOptions",
            " ".join(
                o for o in (sharing, compiling, _THROUGHPUT_COLLECTOR, _QUIET_CLASS_SHARING) if o
            ),
        )
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
    else:
        builder = builder.config("spark.jars", ",".join(jars))  # the executors' copies
    return builder.getOrCreate()
