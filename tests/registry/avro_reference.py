"""Apache Avro's own verdicts (SchemaCompatibility, Avro 1.12) next to the registry's.

``reference_verdicts`` compiles avro_reference/AvroVerdicts.java against the jars Maven
resolves for avro_reference/pom.xml (cached in .state/cache) and runs it once over all
pairs; ``registry_verdicts`` asks ``changebroker.registry.compat`` the same questions. Given the
registry's examples (``registry_examples``), the same run decodes each with Avro's own
decoder.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from changebroker import maven
from changebroker.registry.compat import SchemaError, avro_violations
from changebroker.registry.compat.avro import parse
from tests.registry.avro_corpus import Pair
from tests.support.services import CACHE

HERE = Path(__file__).parent / "avro_reference"


@dataclass(frozen=True)
class Example:
    """A registry example, and what Avro's decoder made of it."""

    writer: str  # "old" or "new": the schema that wrote the datum; the other reads it
    datum: Any
    rule: str
    written: bool | None = None  # Avro's JSON decoder took the datum with the writer's schema
    read: bool | None = None  # Avro's resolving decoder read it with the other schema
    error: str = ""


@dataclass(frozen=True)
class Verdict:
    """None for a direction when either schema is invalid (``invalid`` says which)."""

    invalid: tuple[bool, bool]  # (old, new)
    backward: bool | None  # the new schema reads data written with the old
    forward: bool | None  # the old schema reads data written with the new
    examples: tuple[Example, ...] = ()  # with Avro's answers, where examples were sent

    @property
    def full(self) -> bool | None:
        if self.backward is None or self.forward is None:
            return None
        return self.backward and self.forward


def reference_verdicts(
    pairs: Sequence[Pair], examples: Sequence[Sequence[Example]] | None = None
) -> list[Verdict]:
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
    sent = examples if examples is not None else [()] * len(pairs)
    lines = "".join(
        json.dumps(
            {
                "old": p.old,
                "new": p.new,
                "examples": [{"writer": e.writer, "datum": e.datum} for e in listed],
            }
        )
        + "\n"
        for p, listed in zip(pairs, sent, strict=True)
    )
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
        Verdict(
            (a["old"] is not None, a["new"] is not None),
            a["backward"],
            a["forward"],
            tuple(
                replace(e, written=c["written"], read=c["read"], error=c.get("error", ""))
                for e, c in zip(listed, a["examples"], strict=True)
            ),
        )
        for a, listed in zip(answers, sent, strict=True)
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


def registry_examples(pair: Pair) -> dict[str, tuple[set[str], list[Example]]]:
    """For each direction the registry finds incompatible, keyed by the schema that writes
    ("old": the new schema reads the old one's data): the rules its violations name, and its
    proven examples (data the writer may write that the reader cannot read)."""
    if not (_valid(pair.old) and _valid(pair.new)):
        return {}
    found = {}
    for writer, writer_schema, reader_schema in (
        ("old", pair.old, pair.new),
        ("new", pair.new, pair.old),
    ):
        violations = avro_violations(reader_schema, writer_schema)
        if violations:
            rules = {str(v.rule) for v in violations}
            found[writer] = (
                rules,
                [Example(writer, v.example, v.rule) for v in violations if v.proven],
            )
    return found
