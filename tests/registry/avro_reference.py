"""Apache Avro's own verdicts (SchemaCompatibility, Avro 1.12) next to the registry's.

``reference_verdicts`` compiles avro_reference/AvroVerdicts.java against the jars Maven
resolves for avro_reference/pom.xml (cached in .state/cache) and runs it once over all
pairs; ``registry_verdicts`` asks ``registry.compat`` the same questions.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from changebroker.stack import maven
from registry.compat import SchemaError, avro_violations
from registry.compat.avro import parse
from tests.registry.avro_corpus import Pair
from tests.support.services import CACHE

HERE = Path(__file__).parent / "avro_reference"


@dataclass(frozen=True)
class Verdict:
    """None for a direction when either schema is invalid (``invalid`` says which)."""

    invalid: tuple[bool, bool]  # (old, new)
    backward: bool | None  # the new schema reads data written with the old
    forward: bool | None  # the old schema reads data written with the new

    @property
    def full(self) -> bool | None:
        if self.backward is None or self.forward is None:
            return None
        return self.backward and self.forward


def reference_verdicts(pairs: Sequence[Pair]) -> list[Verdict]:
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            raise RuntimeError(
                f"{tool} is needed for the Avro reference: apt-get install default-jdk"
            )
    jars = maven.resolve_jars(HERE / "pom.xml", CACHE / "avro-reference-jars")
    classpath = ":".join(str(j) for j in jars)
    classes = CACHE / "avro-reference-classes"
    classes.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["javac", "-d", str(classes), "-cp", classpath, str(HERE / "AvroVerdicts.java")],
        check=True,
        capture_output=True,
    )
    lines = "".join(json.dumps({"old": p.old, "new": p.new}) + "\n" for p in pairs)
    done = subprocess.run(
        ["java", "-cp", f"{classes}:{classpath}", "AvroVerdicts"],
        input=lines,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    if len(answers) != len(pairs):
        raise RuntimeError(f"AvroVerdicts answered {len(answers)} of {len(pairs)}: {done.stderr}")
    return [
        Verdict((a["old"] is not None, a["new"] is not None), a["backward"], a["forward"])
        for a in answers
    ]


def _valid(schema: object) -> bool:
    try:
        parse(schema)
        return True
    except SchemaError:
        return False


def registry_verdict(pair: Pair) -> Verdict:
    invalid = (not _valid(pair.old), not _valid(pair.new))
    if any(invalid):
        return Verdict(invalid, None, None)
    return Verdict(
        invalid,
        not avro_violations(pair.new, pair.old),
        not avro_violations(pair.old, pair.new),
    )


def registry_verdicts(pairs: Sequence[Pair]) -> list[Verdict]:
    return [registry_verdict(p) for p in pairs]
