"""An installed changebroker is one import package, ``changebroker``, and works without the
checkout: the parts (changeserver/, broker/, bridge/, registry/, replay/, console/, sql/) are its
subpackages, linked from changebroker/, and every import names them so.

The wheel test builds the sdist and the wheel from it out of a copy of the checkout's files,
installs the wheel with the lock into a new virtual environment outside the checkout, beside
another distribution named ``registry``, and runs ``changebroker up --demo`` there. It takes
minutes: ``pytest -m wheel`` selects it, ``-m "not wheel"`` leaves it out.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import REPO_ROOT, cli

PACKAGE = "changebroker"
PARTS = ("changeserver", "broker", "bridge", "registry", "replay", "console", "sql")
LOCK = REPO_ROOT / "requirements" / "constraints.txt"
# The stranger: a distribution of another project that owns the top-level name ``registry``.
STRANGER_MARK = "a registry that is not changebroker's"


def _python_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [REPO_ROOT / name for name in listed.split("\0") if name]


def _imported_parts(path: Path) -> list[str]:
    """The imports in ``path`` that name a part as a top-level package."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [f"{path.name}:{node.lineno}: {name}" for name in names if _is_part(name)]
    return found


def _is_part(module: str) -> bool:
    return module.split(".")[0] in PARTS


def test_every_import_names_the_parts_as_changebroker_subpackages() -> None:
    stray = [found for path in _python_files() for found in _imported_parts(path)]
    assert stray == [], f"import these as {PACKAGE}.<part>: {stray}"


def _copy_checkout(dest: Path) -> None:
    """The checkout's files as a clone has them (tracked and new, nothing ignored: no .venv,
    no .state, no build output), links kept as links."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in sorted(set(filter(None, listed.split("\0")))):
        source, target = REPO_ROOT / name, dest / name
        if not source.is_symlink() and not source.exists():
            continue  # deleted in the work tree
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)


def _run(*argv: str | Path, cwd: Path, timeout: float = 1800) -> str:
    done = subprocess.run(
        [str(arg) for arg in argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
    )
    assert done.returncode == 0, f"{argv}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def _site_packages(venv: Path) -> Path:
    found = _run(
        venv / "bin" / "python",
        "-c",
        "import sysconfig; print(sysconfig.get_path('purelib'))",
        cwd=venv,
    )
    return Path(found.strip())


def _record(site: Path, dist: str) -> list[tuple[str, str]]:
    """(path, hash) of every file ``dist``'s installation wrote, as its RECORD lists them."""
    (info,) = site.glob(f"{dist}-*.dist-info")
    rows = [line.split(",") for line in (info / "RECORD").read_text().splitlines() if line]
    return [(row[0], row[1]) for row in rows]


def _top_level(record: list[tuple[str, str]]) -> set[str]:
    """The importable top-level names a RECORD installs into site-packages."""
    names = set()
    for path, _ in record:
        first = path.split("/")[0]
        if first == ".." or first.endswith((".dist-info", ".data")) or first == "__pycache__":
            continue  # scripts in bin/, metadata
        names.add(first.removesuffix(".py").removesuffix(".pth"))
    return names


def _changed_files(site: Path, record: list[tuple[str, str]]) -> list[str]:
    """The files of a RECORD whose content no longer has the hash it was installed with."""
    changed = []
    for path, digest in record:
        if not digest:
            continue  # RECORD itself
        algorithm, _, expected = digest.partition("=")
        content = (site / path).read_bytes() if (site / path).exists() else b""
        actual = base64.urlsafe_b64encode(hashlib.new(algorithm, content).digest()).rstrip(b"=")
        if actual.decode() != expected:
            changed.append(path)
    return changed


def _stranger_source(folder: Path) -> Path:
    (folder / "registry").mkdir(parents=True)
    (folder / "registry" / "__init__.py").write_text(f"MARK = {STRANGER_MARK!r}\n")
    (folder / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=69"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "registry"\nversion = "9.9.9"\n'
        '[tool.setuptools]\npackages = ["registry"]\n'
    )
    return folder


@pytest.mark.wheel
@pytest.mark.timeout(3600)
def test_the_wheel_installs_one_package_that_runs_the_stack_beside_another_registry(
    tmp_path: Path,
) -> None:
    timings: dict[str, float] = {}
    started = time.monotonic()

    def lap(name: str) -> None:
        nonlocal started
        timings[name] = round(time.monotonic() - started, 1)
        started = time.monotonic()

    source, dist = tmp_path / "source", tmp_path / "dist"
    _copy_checkout(source)
    # The sdist first, then the wheel built from the unpacked sdist: the sdist is complete.
    _run(sys.executable, "-m", "build", "--outdir", dist, source, cwd=tmp_path)
    sdists, wheels = list(dist.glob("*.tar.gz")), list(dist.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, list(dist.iterdir())
    lap("build sdist and wheel")

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    pip = (venv / "bin" / "python", "-m", "pip", "install", "-q")
    _run(*pip, _stranger_source(tmp_path / "stranger"), cwd=tmp_path)
    site = _site_packages(venv)
    stranger = _record(site, "registry")
    _run(*pip, "-c", LOCK, wheels[0], cwd=tmp_path)
    lap("install the wheel into a new venv")

    assert _top_level(_record(site, PACKAGE)) == {PACKAGE}
    assert _changed_files(site, stranger) == []
    found = _run(
        venv / "bin" / "python", "-c", "import registry; print(registry.MARK)", cwd=tmp_path
    )
    assert found.strip() == STRANGER_MARK

    # A fresh state folder, where an installed changebroker puts it by default.
    env = cli.stack_env(tmp_path / "unused")
    del env["CHANGEBROKER_STATE_DIR"]
    env["XDG_STATE_HOME"] = str(tmp_path / "xdg")
    state = tmp_path / "xdg" / PACKAGE
    program = [str(venv / "bin" / "changebroker")]
    try:
        cli.up_demo(env, program=program, cwd=tmp_path)
        lap("up --demo")
        assert (state / "logs" / "broker.log").exists(), list(state.iterdir())
    finally:
        purged = cli.changebroker(env, "down", "--purge", program=program, cwd=tmp_path)
    lap("down --purge")
    assert purged.returncode == 0, purged.stdout + purged.stderr
    assert not (state / "data").exists()
    assert _changed_files(site, stranger) == []
    assert _changed_files(site, _record(site, PACKAGE)) == [], "the stack wrote into the package"
    print(f"wheel test timings (s): {timings}")
