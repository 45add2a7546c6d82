"""Resolve a pom's jars from Maven Central once, and reuse them after."""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from changebroker import logs

log = logging.getLogger(__name__)


def resolve_jars(pom: Path, dest: Path, *, include_artifacts: Sequence[str] = ()) -> list[Path]:
    """The runtime jars of ``pom`` in ``dest``; runs Maven only when the pom changed."""
    stamp = dest / ".resolved"
    digest = hashlib.sha256(pom.read_bytes() + ",".join(include_artifacts).encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest:
        return sorted(dest.glob("*.jar"))
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(
            "Maven (mvn) is needed to fetch the Kafka/Spark jars: run scripts/install.sh, "
            "or apt-get install maven"
        )
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    argv = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={dest}",
        "-DincludeScope=runtime",
    ]
    if include_artifacts:
        argv.append("-DincludeArtifactIds=" + ",".join(include_artifacts))
    log.info("resolving jars from Maven Central", extra=logs.fields(pom=pom.name))
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"mvn failed for {pom}:\n{done.stdout[-4000:]}{done.stderr[-4000:]}")
    stamp.write_text(digest)
    return sorted(dest.glob("*.jar"))
