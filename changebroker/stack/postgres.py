"""A local Postgres from the Debian binaries, with logical replication on.

Postgres refuses to run as root, so when we are root every server command
runs as the ``postgres`` user (``runuser``) and the data folder belongs to it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psycopg

from changebroker import logs
from changebroker.config import DEFAULT_DATABASE, DEFAULT_META_DATABASE
from changebroker.stack.processes import port_open, read_pid, wait_until
from changebroker.state import StateDir

log = logging.getLogger(__name__)

MIN_VERSION = 15
SERVER_USER = "postgres"


def find_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/N/bin`` with N >= 15 (Debian's layout), if any."""
    root = Path("/usr/lib/postgresql")
    versions = sorted(
        (int(p.name) for p in root.glob("*") if p.name.isdigit() and (p / "bin/initdb").exists()),
        reverse=True,
    )
    return root / str(versions[0]) / "bin" if versions and versions[0] >= MIN_VERSION else None


def ensure_installed() -> Path:
    """Postgres's bin folder, installing Debian's ``postgresql`` package when absent."""
    found = find_bin_dir()
    if found:
        return found
    if os.geteuid() != 0:
        raise RuntimeError(
            "PostgreSQL >= 15 is not installed: run `sudo apt-get install postgresql` "
            "or set CHANGEBROKER_PG_DSN to an existing server"
        )
    log.info("installing Debian package postgresql")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", "postgresql"],
        check=True,
        env=env,
    )
    found = find_bin_dir()
    if not found:
        raise RuntimeError("apt-get installed postgresql but no initdb was found under /usr/lib")
    return found


@dataclass
class LocalPostgres:
    state: StateDir
    port: int
    host: str = "127.0.0.1"
    # The test stack throws its data away; skipping fsync makes it much faster.
    # (synchronous_commit stays on: logical decoding only sees flushed WAL.)
    durable: bool = True

    @property
    def dsn(self) -> str:
        """The application database, the one the changeserver publishes."""
        return self._database_dsn(DEFAULT_DATABASE)

    @property
    def meta_dsn(self) -> str:
        """The broker's and the registry's metadata."""
        return self._database_dsn(DEFAULT_META_DATABASE)

    def _database_dsn(self, name: str) -> str:
        return f"postgresql://{SERVER_USER}@{self.host}:{self.port}/{name}"

    @property
    def data_dir(self) -> Path:
        preferred = self.state.data("postgres")
        if os.geteuid() != 0 or _reachable_by_server_user(preferred.parent):
            return preferred
        # The checkout is not reachable by the postgres user (e.g. a 0700 home).
        digest = hashlib.sha256(str(self.state.root).encode()).hexdigest()[:12]
        return Path("/var/tmp") / f"changebroker-{digest}" / "postgres"

    @property
    def log_file(self) -> Path:
        """Beside the data when that had to move out of reach of the state folder."""
        data = self.data_dir
        if data.parent == self.state.root / "data":
            return self.state.log_file("postgres")
        return data.parent / "postgres.log"

    def running(self) -> bool:
        return (self.data_dir / "postmaster.pid").exists() and port_open(self.host, self.port)

    def pid(self) -> int | None:
        """The postmaster's pid while it runs (frozen counts: it may thaw), else None."""
        return read_pid(self.data_dir / "postmaster.pid")

    def start(self) -> None:
        bin_dir = ensure_installed()
        data = self.data_dir
        if not (data / "PG_VERSION").exists():
            self._initdb(bin_dir, data)
        self._write_config(data)
        if not self.running():
            log_file = self.log_file
            log_file.touch()
            _chown_to_server_user(log_file)
            self._run(
                bin_dir / "pg_ctl",
                "-D",
                str(data),
                "-l",
                str(log_file),
                "-w",
                "-t",
                "120",
                "-o",
                f"-p {self.port}",
                "start",
            )
        wait_until(lambda: port_open(self.host, self.port), timeout=60, what="Postgres to listen")
        self._ensure_databases()
        log.info("postgres ready", extra=logs.fields(dsn=self.dsn))

    def stop(self) -> bool:
        data = self.data_dir
        bin_dir = find_bin_dir()
        if bin_dir is None or not (data / "postmaster.pid").exists():
            return False
        self._run(bin_dir / "pg_ctl", "-D", str(data), "-m", "fast", "-w", "-t", "60", "stop")
        return True

    def purge(self) -> None:
        data = self.data_dir
        shutil.rmtree(data, ignore_errors=True)
        if data.parent != self.state.root / "data":
            shutil.rmtree(data.parent, ignore_errors=True)

    def _initdb(self, bin_dir: Path, data: Path) -> None:
        data.mkdir(parents=True, exist_ok=True)
        _chown_to_server_user(data)
        data.chmod(0o700)
        log.info("initdb", extra=logs.fields(data=str(data)))
        self._run(
            bin_dir / "initdb",
            "-D",
            str(data),
            "-U",
            SERVER_USER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
        )

    def _write_config(self, data: Path) -> None:
        settings = {
            "listen_addresses": f"'{self.host}'",
            "port": str(self.port),
            "unix_socket_directories": f"'{data}'",
            "wal_level": "logical",
            "max_replication_slots": "64",
            "max_wal_senders": "64",
            "max_connections": "300",
            "shared_buffers": "256MB",
            "fsync": "on" if self.durable else "off",
            "full_page_writes": "on" if self.durable else "off",
            "timezone": "'UTC'",
        }
        text = "".join(f"{key} = {value}\n" for key, value in settings.items())
        conf = data / "changebroker.conf"
        conf.write_text(text)
        _chown_to_server_user(conf)
        main_conf = data / "postgresql.conf"
        include = "include = 'changebroker.conf'\n"
        if include not in main_conf.read_text():
            with open(main_conf, "a") as out:
                out.write(include)

    def _ensure_databases(self) -> None:
        with psycopg.connect(self._database_dsn("postgres"), autocommit=True) as conn:
            for name in (DEFAULT_DATABASE, DEFAULT_META_DATABASE):
                exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if not exists.fetchone():
                    conn.execute(f'CREATE DATABASE "{name}"')

    def _run(self, *argv: object) -> None:
        command = [str(a) for a in argv]
        if os.geteuid() == 0:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, cwd="/")
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")


def _chown_to_server_user(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, SERVER_USER, SERVER_USER)


def _reachable_by_server_user(folder: Path) -> bool:
    done = subprocess.run(
        ["runuser", "-u", SERVER_USER, "--", "test", "-x", str(folder)], capture_output=True
    )
    return done.returncode == 0
