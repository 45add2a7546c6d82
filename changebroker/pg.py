"""Postgres connection plumbing and the versioned DDL runner for ``sql/``."""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from collections.abc import Iterator
from importlib.resources.abc import Traversable

import psycopg
from psycopg import conninfo

from changebroker import logs, sql

log = logging.getLogger(__name__)

_MIGRATION_FILE = re.compile(r"^(\d{3,})_[a-z0-9_]+\.sql$")


def with_database(dsn: str, dbname: str) -> str:
    """The same server and credentials as ``dsn``, another database."""
    params = conninfo.conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return conninfo.make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


@contextlib.contextmanager
def scratch_database(server_dsn: str, prefix: str) -> Iterator[str]:
    """A new database named ``<prefix>_<random>`` on ``server_dsn``'s server, dropped after."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_database(server_dsn, name)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def connect(dsn: str, *, autocommit: bool = False) -> psycopg.Connection:
    """A connection with a name Postgres shows in ``pg_stat_activity``."""
    return psycopg.connect(dsn, autocommit=autocommit, application_name="changebroker")


def components() -> list[str]:
    """The components with migrations: the folders of ``sql/``."""
    found = (entry for entry in sql.DIR.iterdir() if entry.is_dir())
    return sorted(entry.name for entry in found if entry.name != "__pycache__")


def migrations(component: str) -> list[tuple[int, Traversable]]:
    """``sql/<component>/NNN_name.sql`` files as ``(version, path)``, in order."""
    folder = sql.DIR / component
    found = []
    for path in sorted(folder.iterdir(), key=lambda file: file.name):
        if not path.name.endswith(".sql"):
            continue
        match = _MIGRATION_FILE.match(path.name)
        if not match:
            raise RuntimeError(f"{path}: migration files are named NNN_lowercase_words.sql")
        found.append((int(match.group(1)), path))
    return found


def migrate(dsn: str, component: str, *, until: int | None = None) -> int:
    """Apply ``component``'s pending migrations (up to version ``until``, if given: a test of
    a migration starts from the schema before it); returns the version now in place.

    Each file runs in its own transaction under an advisory lock, so several
    processes starting at once apply each file exactly once.
    """
    with connect(dsn) as conn:
        # Under the lock too: two CREATE TABLE IF NOT EXISTS at once collide in pg_type.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('changebroker_migrations'))")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS changebroker_migrations ("
            " component text NOT NULL, version int NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now(),"
            " PRIMARY KEY (component, version))"
        )
        conn.commit()
        current = 0
        for version, path in migrations(component):
            if until is not None and version > until:
                break
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(hashtext('changebroker_migrations'))")
                done = conn.execute(
                    "SELECT 1 FROM changebroker_migrations WHERE component = %s AND version = %s",
                    (component, version),
                ).fetchone()
                if not done:
                    conn.execute(path.read_text().encode())
                    conn.execute(
                        "INSERT INTO changebroker_migrations (component, version) VALUES (%s, %s)",
                        (component, version),
                    )
                    log.info(
                        "migration applied", extra=logs.fields(component=component, file=path.name)
                    )
            current = version
        return current
