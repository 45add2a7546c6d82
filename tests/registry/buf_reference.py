"""Buf's own verdicts (``buf breaking``, categories WIRE and WIRE_JSON) on pairs of .proto files.

``buf_binary`` builds Buf's CLI from the Go module proxy once (``go install``) and keeps it in
.state/cache; ``buf_rules`` runs it once per category over all pairs, each pair a file of its
own (``p<i>/schema.proto``, package ``p<i>``) in an old and a new module.

    .venv/bin/python -m tests.registry.buf_reference   # builds the binary (install.sh --test)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tests.registry.protobuf_corpus import Pair
from tests.support.services import CACHE

BUF_MODULE = "github.com/bufbuild/buf/cmd/buf"
BUF_VERSION = "v1.75.0"
BUF = CACHE / f"buf-{BUF_VERSION}" / "buf"


def _go() -> str:
    found = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(found).exists():
        raise RuntimeError(
            f"Go is needed to build Buf's CLI ({BUF_MODULE}@{BUF_VERSION}, which needs Go 1.26):"
            " install Go and put it on PATH"
        )
    return found


def buf_binary() -> Path:
    """Buf's CLI, built from its module on the first call (a few minutes) and kept."""
    if BUF.exists():
        return BUF
    BUF.parent.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=BUF.parent.parent) as building:
        env = {**os.environ, "GOBIN": building, "GOFLAGS": "-buildvcs=false"}
        subprocess.run(
            [_go(), "install", f"{BUF_MODULE}@{BUF_VERSION}"],
            env=env,
            check=True,
            timeout=1800,
        )
        BUF.parent.mkdir(exist_ok=True)
        os.replace(Path(building) / "buf", BUF)
    return BUF


def package(index: int) -> str:
    return f"p{index}"


def buf_rules(pairs: Sequence[Pair], category: str) -> list[set[str]]:
    """For each pair, the ids of the rules ``buf breaking`` (with ``category``) reports."""
    buf = buf_binary()
    with tempfile.TemporaryDirectory() as work:
        modules = {side: Path(work) / side for side in ("old", "new")}
        for module in modules.values():
            module.mkdir()
            (module / "buf.yaml").write_text(f"version: v2\nbreaking:\n  use:\n    - {category}\n")
        for index, pair in enumerate(pairs):
            texts = dict(zip(("old", "new"), pair.texts(package(index)), strict=True))
            for side, module in modules.items():
                (module / package(index)).mkdir()
                (module / package(index) / "schema.proto").write_text(texts[side])
        done = subprocess.run(
            [str(buf), "breaking", str(modules["new"]), "--against", str(modules["old"]),
             "--error-format", "json"],
            capture_output=True, text=True, timeout=300, cwd=work,
        )  # fmt: skip
    if done.returncode not in (0, 100):  # 100: breaking changes found
        raise RuntimeError(f"buf breaking failed ({done.returncode}): {done.stderr}")
    found: list[set[str]] = [set() for _ in pairs]
    for line in done.stdout.splitlines():
        if line.strip():
            annotation = json.loads(line)
            index = int(Path(annotation["path"]).parent.name.removeprefix("p"))
            found[index].add(annotation["type"])
    return found


if __name__ == "__main__":
    print(f"Buf's CLI: {buf_binary()}")
