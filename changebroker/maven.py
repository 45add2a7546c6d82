"""Resolve a pom's jars from Maven Central once, and reuse them after.

The poms ship inside the package as data (``poms/``: in a checkout a link to
``docker/local/``), so an installed wheel finds them as a clone does."""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
from collections.abc import Sequence
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from changebroker import logs

log = logging.getLogger(__name__)


def pom(name: str) -> Traversable:
    """The pom ``name`` shipped with the package."""
    return resources.files("changebroker") / "poms" / name


def resolve_jars(
    pom: Traversable, dest: Path, *, include_artifacts: Sequence[str] = ()
) -> list[Path]:
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
    log.info("resolving jars from Maven Central", extra=logs.fields(pom=pom.name))
    with resources.as_file(pom) as pom_file:
        argv = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(pom_file),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={dest}",
            "-DincludeScope=runtime",
        ]
        if include_artifacts:
            argv.append("-DincludeArtifactIds=" + ",".join(include_artifacts))
        done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"mvn failed for {pom}:\n{done.stdout[-4000:]}{done.stderr[-4000:]}")
    stamp.write_text(digest)
    return sorted(dest.glob("*.jar"))
