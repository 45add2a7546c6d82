"""The Spark driver's class archive (replay/class_archive.py): ``scripts/install.sh`` makes it,
and every SparkSession the project starts maps it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from changebroker.replay.class_archive import ensure
from changebroker.replay.spark import class_archive
from tests.support import REPO_ROOT

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_the_install_made_the_archive_and_the_driver_maps_it(spark: SparkSession) -> None:
    archive = class_archive()
    assert archive.is_file(), (
        "scripts/install.sh makes it (.venv/bin/python -m changebroker.replay.class_archive)"
    )
    driver = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
    # Mapped into the driver JVM's memory: the JVM accepted it (else it maps nothing).
    assert str(archive) in Path(f"/proc/{driver}/maps").read_text()


_ONE_RUN_DRIVER = """
from pathlib import Path
from changebroker.replay.spark import spark_session
spark = spark_session("local[1]", one_run=True)
driver = spark.sparkContext._gateway.proc.pid
print(Path(f"/proc/{driver}/cmdline").read_bytes().replace(b"\\0", b" ").decode())
print(Path(f"/proc/{driver}/maps").read_text())
spark.stop()
"""


def test_a_one_run_driver_compiles_with_c1_alone_and_maps_the_archive_too() -> None:
    shown = subprocess.run(
        [sys.executable, "-c", _ONE_RUN_DRIVER],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
        timeout=300,
    ).stdout
    assert "-XX:TieredStopAtLevel=1" in shown
    assert str(class_archive()) in shown


def test_an_existing_archive_is_kept() -> None:
    archive = class_archive()
    made = archive.stat().st_mtime_ns
    assert ensure() == archive
    shown = subprocess.run(
        [sys.executable, "-m", "changebroker.replay.class_archive"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
        timeout=120,
    ).stdout
    assert shown.strip() == f"spark class archive: {archive}"
    assert archive.stat().st_mtime_ns == made


_KAFKA_CLIENT_CLASS = """
from changebroker.replay.spark import spark_session
spark = spark_session("local[1]", one_run=True)
spark.sparkContext._jvm.java.lang.Class.forName("org.apache.kafka.clients.consumer.KafkaConsumer")
spark.stop()
"""


def test_the_kafka_clients_classes_come_from_the_archive(tmp_path: Path) -> None:
    # A replay's first Kafka read loads them; the archive was made without a broker.
    loaded = tmp_path / "classes.log"
    subprocess.run(
        [sys.executable, "-c", _KAFKA_CLIENT_CLASS],
        capture_output=True,
        check=True,
        cwd=REPO_ROOT,
        timeout=300,
        env={**os.environ, "JAVA_TOOL_OPTIONS": f"-Xlog:class+load:file={loaded}.%p"},
    )
    lines = [
        line
        for log in tmp_path.glob("classes.log.*")
        for line in log.read_text().splitlines()
        if " org.apache.kafka.clients.consumer.KafkaConsumer " in line
    ]
    assert len(lines) == 1, lines
    assert "source: shared objects file" in lines[0]
