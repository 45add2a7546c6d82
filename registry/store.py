"""Subjects and schema versions in Postgres, and the rules that guard them.

Every change to one subject holds that subject's row lock, so versions go 1..N
with no gaps or duplicates, and one definition gets one id. A process writes its
registrations of one subject in batches (``Registrations``): checked before the
lock is taken, and written in one statement only if the subject is still as it
was read; otherwise each is registered again in a transaction holding the lock
throughout. Schema ids come from a sequence and are unique across all subjects.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection, AsyncCursor
from psycopg.errors import ForeignKeyViolation, UniqueViolation
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from changebroker import logs
from changebroker.notified import NotifiedCache
from changebroker.numerals import whole_number
from changebroker.registry import errors, metrics
from changebroker.registry.compat import Mode, Violation, check_labelled, share_subtrees
from changebroker.registry.compat.protobuf import Category, protobuf_check
from changebroker.registry.compat.rules import Rule
from changebroker.registry.definitions import (
    Definition,
    canonical,
    engine_format,
    format_of_serialization,
    normalize_format,
    parse_definition,
    text_column,
)
from changebroker.registry.errors import RegistryError

log = logging.getLogger(__name__)

# What sql/registry/003's trigger notifies on every write to subjects or schemas.
CHANGES_CHANNEL = "registry_changed"

# The tenant and namespace of the broker's event types' subjects (broker/event_types/store.py):
# they change only through the broker, in the transaction that changes the event type.
BROKER_TENANT = "changebroker"
BROKER_NAMESPACE = "event-types"
# Their avro_schema versions: a subject has one format.
BROKER_AVRO_NAMESPACE = "event-types-avro"


def brokers(key: SubjectKey) -> bool:
    """Is ``key`` (named whole) a subject of the broker's event types?"""
    return key.tenant == BROKER_TENANT and key.namespace in (
        BROKER_NAMESPACE,
        BROKER_AVRO_NAMESPACE,
    )


def brokers_subject(key: SubjectKey) -> RegistryError:
    """A change of the broker's subject through the registry: 40902."""
    return RegistryError(
        errors.IN_USE,
        f"subject {key.subject!r} (tenant {BROKER_TENANT}, namespace {key.namespace}) holds"
        f" the schemas of the broker's event type {key.subject!r}: change them through the"
        f" broker (PUT /event-types/{key.subject}, or DELETE to remove them)",
    )


SUBJECT_COLUMNS = (
    "id, tenant, namespace, subject, app, description, status, compatibility, coordinate,"
    " format, protobuf_category, created_time, last_modified_time"
)
# Subject metadata a client may set (docs/specs/openschema-spec-cn.txt, 7.2.5), besides tenant
# and namespace.
EDITABLE = ("app", "description", "status", "compatibility", "coordinate", "format")

Conn = AsyncConnection[DictRow]
# A pool connection, or a dict-row cursor on a connection inside someone else's transaction.
Db = Conn | AsyncCursor[DictRow]


@dataclass(frozen=True)
class SubjectKey:
    """A subject name; tenant and namespace narrow it down when given (None: any)."""

    subject: str
    tenant: str | None = None
    namespace: str | None = None


def parse_category(value: Any) -> Category:
    try:
        return Category(str(value).upper())
    except ValueError:
        raise RegistryError(
            errors.INVALID_INPUT,
            f"protobufCategory {value!r} is not one of {', '.join(c.value for c in Category)}",
        ) from None


def parse_mode(value: Any) -> Mode:
    try:
        return Mode(str(value).upper())
    except ValueError:
        raise RegistryError(
            errors.INVALID_INPUT,
            f"compatibility {value!r} is not one of {', '.join(m.value for m in Mode)}",
        ) from None


def parse_version(value: str) -> int | None:
    """A version path segment: a positive integer, or ``latest`` (None); else 42202."""
    if value.lower() == "latest":
        return None
    if whole_number(value) and 0 < int(value) < 2**31:
        return int(value)
    raise RegistryError(
        errors.INVALID_VERSION, f"version {value!r} is not a positive integer or 'latest'"
    )


def _timestamp(value: datetime.datetime) -> str:
    """The spec's style: ``2021-09-14T02:26:09.018`` (UTC)."""
    utc = value.astimezone(datetime.UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}"


def subject_json(row: Mapping[str, Any]) -> dict[str, Any]:
    body = {
        "subject": row["subject"],
        "namespace": row["namespace"],
        "tenant": row["tenant"],
        "app": row["app"],
        "description": row["description"],
        "status": row["status"],
        "compatibility": row["compatibility"],
        "coordinate": row["coordinate"],
        "format": row["format"],
        "createdTime": _timestamp(row["created_time"]),
        "lastModifiedTime": _timestamp(row["last_modified_time"]),
    }
    if row["format"] == "PB":  # Buf's category its versions are checked with
        body["protobufCategory"] = row["protobuf_category"]
    return body


def schema_json(row: Mapping[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "version": row["version"],
        "id": str(row["id"]),
        "serialization": row["serialization"],
        "schemaDefinition": row["definition"],
    }
    for optional in ("name", "comment", "validator"):
        if row[optional] is not None:
            body[optional] = row[optional]
    return body


def _optional_text(body: Mapping[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None:
        return value
    if not isinstance(value, str):
        raise RegistryError(errors.INVALID_INPUT, f"{key!r} must be a string")
    return text_column(value, repr(key))


@dataclass(frozen=True)
class _Pending:
    body: Mapping[str, Any]
    answer: asyncio.Future[Registered]


class Registrations:
    """A process's registrations of one subject, written in batches.

    A subject's versions are written one after another, each checked against the ones
    before it. Registrations that arrive while a batch of the subject is written wait for
    the next: checked in order, each against the one accepted before it, and written
    together in one statement. One registration alone is a batch of one."""

    def __init__(self, pool: AsyncConnectionPool[Conn]) -> None:
        self._pool = pool
        self._queues: dict[SubjectKey, list[_Pending]] = {}
        self._writers: set[asyncio.Task[None]] = set()  # held: the loop keeps weak references

    async def register(self, key: SubjectKey, body: Mapping[str, Any]) -> Registered:
        answer: asyncio.Future[Registered] = asyncio.get_running_loop().create_future()
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = []
            writer = asyncio.create_task(self._write_all(key, queue))
            self._writers.add(writer)
            writer.add_done_callback(self._writers.discard)
        queue.append(_Pending(body, answer))
        return await answer

    async def _write_all(self, key: SubjectKey, queue: list[_Pending]) -> None:
        try:
            while queue:
                batch = queue[:]
                queue.clear()
                queue[:0] = await self._write(key, batch)
        finally:
            del self._queues[key]
            for pending in queue:
                pending.answer.cancel()

    async def _write(self, key: SubjectKey, batch: list[_Pending]) -> list[_Pending]:
        """Settles each registration of ``batch``; returns those for the next batch."""
        bodies = [pending.body for pending in batch]
        try:
            async with self._pool.connection() as conn:
                outcomes = await _register_unlocked(conn, key, bodies)
                if outcomes is None:
                    outcomes = [await _register_locked(conn, key, body) for body in bodies]
        except BaseException as error:
            for pending in batch:
                _settle(pending.answer, error)
            if not isinstance(error, Exception):
                raise
            return []
        later = []
        for pending, outcome in zip(batch, outcomes, strict=True):
            if outcome is None:
                later.append(pending)
            else:
                _settle(pending.answer, outcome)
        return later


def _settle(answer: asyncio.Future[Registered], outcome: Registered | BaseException) -> None:
    if answer.done():  # its request was cancelled
        return
    if isinstance(outcome, asyncio.CancelledError):
        answer.cancel()
    elif isinstance(outcome, BaseException):
        answer.set_exception(outcome)
    else:
        answer.set_result(outcome)


class Store:
    def __init__(
        self,
        dsn: str,
        *,
        pool_size: int = 10,
        statement_timeout_ms: int = 10_000,
        cache: NotifiedCache | None = None,
    ):
        self.cache = cache or NotifiedCache(dsn, CHANGES_CHANNEL)  # never started: keeps nothing
        self.pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            dsn,
            connection_class=Conn,
            open=False,
            min_size=1,
            max_size=pool_size,
            timeout=max(statement_timeout_ms / 1000, 1.0),
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "application_name": "changebroker-registry",
                "options": f"-c statement_timeout={statement_timeout_ms}",
            },
        )
        self.registrations = Registrations(self.pool)

    async def open(self) -> None:
        await self.pool.open(wait=True)

    async def close(self) -> None:
        await self.pool.close()

    async def ping(self) -> None:
        async with self.pool.connection() as conn:
            await conn.execute("SELECT 1")

    # -- subjects ---------------------------------------------------------------------

    async def list_subjects(self, tenant: str | None, namespace: str | None) -> list[str]:
        async with self.pool.connection() as conn:
            rows = await (
                await conn.execute(
                    "SELECT DISTINCT subject FROM registry_subjects"
                    " WHERE (%s::text IS NULL OR tenant = %s)"
                    " AND (%s::text IS NULL OR namespace = %s) ORDER BY subject",
                    (tenant, tenant, namespace, namespace),
                )
            ).fetchall()
        return [r["subject"] for r in rows]

    async def pinned(self, key: SubjectKey) -> SubjectKey:
        """The one subject ``key`` names, or would create, named whole (tenant and namespace
        too: a subject created meanwhile elsewhere, the broker's above all, is not the one
        written)."""
        if key.tenant is not None and key.namespace is not None:
            return key
        async with self.pool.connection() as conn:
            row = await _find(conn, key)
        if row is None:
            return SubjectKey(key.subject, key.tenant or "", key.namespace or "")
        return SubjectKey(key.subject, row["tenant"], row["namespace"])

    async def registered(self, key: SubjectKey, body: Mapping[str, Any]) -> int | None:
        """The id of the version of the subject that has ``body``'s definition, or None (also
        when there is no such subject); 42201 for a body no registration would take. Nothing
        is written."""
        async with self.pool.connection() as conn:
            subject = await _find(conn, key)
            if subject is None:
                return None
            [outcome] = await check_registrations(conn, key, subject, [body])
        if isinstance(outcome, RegistryError) and outcome.code != errors.INCOMPATIBLE:
            raise outcome
        return outcome.id if isinstance(outcome, Registered) else None

    async def subject(self, key: SubjectKey) -> dict[str, Any]:
        async with self.pool.connection() as conn:
            return subject_json(await _get(conn, key))

    async def put_subject(self, key: SubjectKey, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create the subject, or update the metadata ``body`` carries (OpenSchema spec, 7.2.5)."""
        async with self.pool.connection() as conn, conn.transaction():
            return subject_json(await put_subject_in(conn, key, body))

    async def delete_subject(self, key: SubjectKey) -> list[int]:
        try:
            async with self.pool.connection() as conn, conn.transaction():
                versions = await delete_subject_in(conn, key)
        except ForeignKeyViolation as error:
            raise _in_use(f"subject {key.subject!r}", error) from None
        log.info("subject deleted", extra=logs.fields(subject=key.subject, versions=len(versions)))
        return versions

    # -- config ---------------------------------------------------------------------

    async def compatibility(self, key: SubjectKey) -> str:
        async with self.pool.connection() as conn:
            return str((await _get(conn, key))["compatibility"])

    async def set_compatibility(self, key: SubjectKey, value: Any) -> str:
        mode = parse_mode(value)
        async with self.pool.connection() as conn, conn.transaction():
            row = await _get(conn, key, lock=True)
            if mode.value != row["compatibility"]:
                await _check_history(conn, row, mode, "the new mode")
                await conn.execute(
                    "UPDATE registry_subjects SET compatibility = %s, last_modified_time = now()"
                    " WHERE id = %s",
                    (mode.value, row["id"]),
                )
        return mode.value

    # -- schemas ----------------------------------------------------------------------

    async def versions(self, key: SubjectKey) -> list[int]:
        async with self.pool.connection() as conn:
            row = await _get(conn, key)
            rows = await (
                await conn.execute(
                    "SELECT version FROM registry_schemas WHERE subject_id = %s ORDER BY version",
                    (row["id"],),
                )
            ).fetchall()
        return [r["version"] for r in rows]

    async def version(self, key: SubjectKey, version: int | None) -> dict[str, Any]:
        """Subject metadata with ``schema`` (OpenSchema spec, 7.2.4); ``None`` is the latest."""
        async with self.pool.connection() as conn:
            row = await _find(conn, key, with_version=(version,))
        if row is None:
            raise RegistryError(errors.SUBJECT_NOT_FOUND, f"subject {key.subject!r} not found")
        if row["schema_id"] is None:
            raise _version_missing(key, version)
        return {**subject_json(row), "schema": schema_json({**row, "id": row["schema_id"]})}

    async def schema(self, schema_id: str) -> dict[str, Any]:
        row = await self._schema_with_subject(schema_id)
        return schema_json(row)

    async def schema_subject(self, schema_id: str) -> dict[str, Any]:
        row = await self._schema_with_subject(schema_id)
        return {"subject": row["subject"], "version": row["version"]}

    async def _schema_with_subject(self, schema_id: str) -> DictRow:
        if not whole_number(schema_id) or int(schema_id) >= 2**63:
            raise RegistryError(errors.SUBJECT_NOT_FOUND, f"schema {schema_id!r} not found")
        async with self.pool.connection() as conn:
            row = await (
                await conn.execute(
                    "SELECT s.*, j.subject FROM registry_schemas s"
                    " JOIN registry_subjects j ON j.id = s.subject_id WHERE s.id = %s",
                    (int(schema_id),),
                )
            ).fetchone()
        if row is None:
            raise RegistryError(errors.SUBJECT_NOT_FOUND, f"schema {schema_id!r} not found")
        return row

    async def register(self, key: SubjectKey, body: Mapping[str, Any]) -> str:
        """The id of ``body``'s definition in the subject: existing, or a new version."""
        try:
            registered = await self.registrations.register(key, body)
        except RegistryError as error:
            if error.code == errors.INCOMPATIBLE:
                metrics.compatibility_checks.labels("incompatible").inc()
            raise
        metrics.registrations.labels("new" if registered.new else "existing").inc()
        if registered.new and registered.version > 1:  # checked against the versions before
            metrics.compatibility_checks.labels("compatible").inc()
        if registered.new:
            log.info(
                "schema registered",
                extra=logs.fields(
                    subject=key.subject, version=registered.version, id=registered.id
                ),
            )
        return str(registered.id)

    async def delete_version(self, key: SubjectKey, version: int | None) -> int:
        async with self.pool.connection() as conn, conn.transaction():
            subject = await _get(conn, key, lock=True)
            row = await _version_row(conn, subject["id"], version)
            if row is None:
                raise _version_missing(key, version)
            remaining = [h for h in await _history(conn, subject["id"]) if h[0] != row["version"]]
            mode = Mode(subject["compatibility"])
            found = _history_violations(
                mode, remaining, subject["format"], subject["protobuf_category"]
            )
            if found:
                raise errors.incompatible(
                    found,
                    f"without version {row['version']} the remaining versions of"
                    f" {key.subject!r} break {mode.value}",
                )
            try:
                await conn.execute("DELETE FROM registry_schemas WHERE id = %s", (row["id"],))
            except ForeignKeyViolation as error:
                raise _in_use(f"version {row['version']} of {key.subject!r}", error) from None
        return int(row["version"])

    async def test_compatibility(
        self, key: SubjectKey, version: int | None, definition: Any
    ) -> list[Violation]:
        """Violations of the subject's mode by ``definition`` against history up to ``version``."""
        # The parsed history, and each verdict on it, are kept until the registry's tables
        # change: stored versions never change, so the same definition gets the same answer
        # (clients check a schema again before registering it, and on every build).
        generation = self.cache.generation
        cache_key = ("compatibility", key, version)
        kept: tuple[Mode, str | None, str, list[tuple[int, Any]]] | None = self.cache.get(cache_key)
        if kept is None:
            async with self.pool.connection() as conn:
                subject = await _get(conn, key)
                row = await _version_row(conn, subject["id"], version)
                if row is None:
                    raise _version_missing(key, version)
                history = await _history(conn, subject["id"], until=row["version"])
            fmt = subject["format"] or format_of_serialization(row["serialization"])
            kept = (Mode(subject["compatibility"]), fmt, subject["protobuf_category"], history)
            size = sum(len(canonical(definition)) for _, definition in history)
            self.cache.put(cache_key, kept, size, generation)
        mode, fmt, category, history = kept
        parsed = parse_definition(fmt, definition)
        verdict_key = ("verdict", key, version, parsed.canonical)
        verdict: tuple[Violation, ...] | None = self.cache.get(verdict_key)
        if verdict is None:
            verdict = tuple(_violations(mode, parsed.value, history, fmt, category))
            size = len(parsed.canonical) + sum(len(v.message) for v in verdict)
            self.cache.put(verdict_key, verdict, size, generation)
        return list(verdict)


# -- in a transaction the caller holds ----------------------------------------------------
# The broker calls these on its own connection, so an event type and its subject change in
# one transaction (both live in one metadata database).


@dataclass(frozen=True)
class Registered:
    id: int
    version: int
    new: bool  # False: the subject already had this definition (same id, no new version)


async def put_subject_in(db: Db, key: SubjectKey, body: Mapping[str, Any]) -> DictRow:
    """Create the subject or update the metadata ``body`` carries; ``key`` names tenant and
    namespace."""
    if key.tenant is None or key.namespace is None:
        raise RegistryError(
            errors.INVALID_INPUT, "tenant and namespace are required to create or update"
        )
    changes: dict[str, Any] = {}
    for column in EDITABLE:
        if column in body:
            changes[column] = _optional_text(body, column)
    if changes.get("compatibility") is not None:
        changes["compatibility"] = parse_mode(changes["compatibility"]).value
    elif "compatibility" in changes:
        del changes["compatibility"]  # null: keep the current mode (BACKWARD when new)
    if changes.get("format") is not None:
        changes["format"] = normalize_format(changes["format"])
    if body.get("protobufCategory") is not None:
        changes["protobuf_category"] = parse_category(body["protobufCategory"]).value
    await db.execute(
        "INSERT INTO registry_subjects (tenant, namespace, subject, status) VALUES"
        " (%s, %s, %s, %s) ON CONFLICT (tenant, namespace, subject) DO NOTHING",
        (key.tenant, key.namespace, key.subject, changes.get("status")),
    )
    row = await _get(db, key, lock=True)
    if "status" not in changes and row["status"] is None:
        raise RegistryError(errors.INVALID_INPUT, "status is required (e.g. released)")
    if "compatibility" in changes and changes["compatibility"] != row["compatibility"]:
        await _check_history(db, row, Mode(changes["compatibility"]), "the new mode")
    if changes.get("protobuf_category", row["protobuf_category"]) != row["protobuf_category"]:
        category = changes["protobuf_category"]
        mode = Mode(changes.get("compatibility") or row["compatibility"])
        await _check_history(
            db, {**row, "protobuf_category": category}, mode, f"{category} rules in"
        )
    if "format" in changes and changes["format"] != row["format"]:
        await _check_format_change(db, row, changes["format"])
    if not changes:
        return row
    assignments = ", ".join(f"{column} = %s" for column in changes)
    updated = await (
        await db.execute(
            f"UPDATE registry_subjects SET {assignments}, last_modified_time = now()"
            f" WHERE id = %s RETURNING {SUBJECT_COLUMNS}",
            (*changes.values(), row["id"]),
        )
    ).fetchone()
    return updated or row


async def delete_subject_in(db: Db, key: SubjectKey) -> list[int]:
    """Delete the subject and its versions; returns the versions it had."""
    row = await _get(db, key, lock=True)
    versions = await (
        await db.execute(
            "SELECT version FROM registry_schemas WHERE subject_id = %s ORDER BY version",
            (row["id"],),
        )
    ).fetchall()
    await db.execute("DELETE FROM registry_subjects WHERE id = %s", (row["id"],))
    return [v["version"] for v in versions]


# The versions that already have the definitions, and the history their subject's mode
# checks against (the latest alone, or all: NULL) unless each definition is there already.
_REGISTRATION_STATE = """
WITH existing AS (
    SELECT DISTINCT t.canonical, e.id, e.version FROM unnest(%(texts)b::text[]) t(canonical),
    LATERAL (
        SELECT id, version FROM registry_schemas WHERE subject_id = %(subject)s
        AND md5(canonical) = md5(t.canonical) AND canonical = t.canonical
        ORDER BY version LIMIT 1
    ) e
), history AS (
    SELECT version, canonical FROM registry_schemas
    WHERE subject_id = %(subject)s AND (SELECT count(*) FROM existing) < %(distinct)s
    ORDER BY version DESC LIMIT %(history)s
)
SELECT ARRAY(SELECT canonical FROM existing ORDER BY canonical) AS existing_texts,
    ARRAY(SELECT id FROM existing ORDER BY canonical) AS existing_ids,
    ARRAY(SELECT version FROM existing ORDER BY canonical) AS existing_versions,
    ARRAY(SELECT version FROM history ORDER BY version) AS versions,
    ARRAY(SELECT canonical FROM history ORDER BY version) AS canonicals
"""

# Checked versions, written only if their subject still has the mode, format and latest
# version they were checked with; under the subject's row lock, so a mode change waits for
# them or they see the mode change. The snapshot may miss a version committed while the
# statement waited for the lock: then its number is taken, and UNIQUE (subject_id, version)
# refuses the statement.
_INSERT_IF_UNCHANGED = """
WITH subject AS (
    SELECT id FROM registry_subjects
    WHERE id = %(subject)s AND compatibility = %(mode)s AND format IS NOT DISTINCT FROM %(format)s
        AND protobuf_category = %(category)s
    FOR UPDATE
)
INSERT INTO registry_schemas
    (subject_id, version, name, comment, serialization, definition, canonical, validator)
SELECT subject.id, v.version, v.name, v.comment, v.serialization, v.definition::json,
    v.canonical, v.validator
FROM subject, unnest(
    %(versions)b::int[], %(names)b::text[], %(comments)b::text[], %(serializations)b::text[],
    %(definitions)b::text[], %(texts)b::text[], %(validators)b::text[]
) AS v(version, name, comment, serialization, definition, canonical, validator)
WHERE (SELECT max(version) FROM registry_schemas WHERE subject_id = %(subject)s)
    IS NOT DISTINCT FROM %(after)s
RETURNING id, version
"""


@dataclass(frozen=True)
class NewVersion:
    """A registration found compatible with its subject as read, and the version it becomes."""

    version: int
    parsed: _Parsed


# What a registration in a batch comes to: None when a definition earlier in the batch is
# the same (it is registered in the next batch, and finds that version).
Outcome = Registered | Exception | None


async def register_in(db: Db, key: SubjectKey, body: Mapping[str, Any]) -> Registered:
    """``body``'s definition in the subject (created if absent): existing, or a new version
    after the subject's mode accepts it."""
    subject = await _find(db, key, lock=True)
    if subject is None:
        await db.execute(
            "INSERT INTO registry_subjects (tenant, namespace, subject) VALUES (%s, %s, %s)"
            " ON CONFLICT (tenant, namespace, subject) DO NOTHING",
            (key.tenant or "", key.namespace or "", key.subject),
        )
        subject = await _get(
            db, SubjectKey(key.subject, key.tenant or "", key.namespace or ""), lock=True
        )
    [checked] = await check_registrations(db, key, subject, [body])
    if not isinstance(checked, NewVersion):
        assert checked is not None  # only a later definition in a batch waits for the next
        if isinstance(checked, RegistryError):
            raise checked
        return checked
    written = await insert_if_unchanged(db, subject, [checked])
    if written is None:
        raise RuntimeError(f"subject {key.subject!r} changed while its row lock was held")
    if subject["format"] is None and checked.parsed.format is not None:
        await db.execute(
            "UPDATE registry_subjects SET format = %s WHERE id = %s",
            (checked.parsed.format, subject["id"]),
        )
    return written[0]


async def _register_locked(conn: Conn, key: SubjectKey, body: Mapping[str, Any]) -> Outcome:
    """``register_in`` in a transaction of its own; its failure is this registration's alone
    (those before it in the batch are committed)."""
    try:
        async with conn.transaction():
            return await register_in(conn, key, body)
    except Exception as error:
        return error


async def _register_unlocked(
    db: Db, key: SubjectKey, bodies: Sequence[Mapping[str, Any]]
) -> list[Outcome] | None:
    """``register_in`` for each of ``bodies`` in order, without holding the subject's lock
    while they are checked; None when they must be registered under the lock: a new
    subject, a subject's first format, or a subject that changed before they were written."""
    subject = await _find(db, key)
    if subject is None or subject["format"] is None:
        return None
    checked = await check_registrations(db, key, subject, bodies)
    new = [outcome for outcome in checked if isinstance(outcome, NewVersion)]
    if not new:
        return [outcome for outcome in checked if not isinstance(outcome, NewVersion)]
    try:
        written = await insert_if_unchanged(db, subject, new)
    except UniqueViolation:
        return None
    if written is None:
        return None
    by_version = {registered.version: registered for registered in written}
    return [
        by_version[outcome.version] if isinstance(outcome, NewVersion) else outcome
        for outcome in checked
    ]


async def check_registrations(
    db: Db, key: SubjectKey, subject: Mapping[str, Any], bodies: Sequence[Mapping[str, Any]]
) -> list[Registered | RegistryError | NewVersion | None]:
    """For each of ``bodies`` in order: the version of ``subject`` that already has its
    definition, or the new version it would be once its mode accepts it (else a 409 error),
    after the new versions before it in ``bodies``."""
    mode = Mode(subject["compatibility"])
    parsed: list[_Parsed | RegistryError] = []
    for body in bodies:
        try:
            parsed.append(_parsed(subject, body))
        except RegistryError as error:
            parsed.append(error)
    texts = [p.definition.canonical for p in parsed if not isinstance(p, RegistryError)]
    state = await (
        await db.execute(_REGISTRATION_STATE, {
            "subject": subject["id"],
            "texts": texts,
            "distinct": len(set(texts)),
            "history": None if mode.transitive else 1,
        })
    ).fetchone()  # fmt: skip
    assert state is not None
    existing = {
        text: Registered(id, version, new=False)
        for text, id, version in zip(
            state["existing_texts"], state["existing_ids"], state["existing_versions"], strict=True
        )
    }
    history = [
        (v, json.loads(c)) for v, c in zip(state["versions"], state["canonicals"], strict=True)
    ]
    accepted: set[str] = set()
    outcomes: list[Registered | RegistryError | NewVersion | None] = []
    for found in parsed:
        if isinstance(found, RegistryError):
            outcomes.append(found)
            continue
        definition = found.definition
        if definition.canonical in existing:
            outcomes.append(existing[definition.canonical])
            continue
        if definition.canonical in accepted:
            outcomes.append(None)
            continue
        violations = _violations(
            mode, definition.value, history, found.format, subject["protobuf_category"]
        )
        if violations:
            outcomes.append(
                errors.incompatible(
                    violations, f"the schema is not {mode.value} compatible with {key.subject!r}"
                )
            )
            continue
        version = (history[-1][0] + 1) if history else 1
        history.append((version, definition.value))
        accepted.add(definition.canonical)
        outcomes.append(NewVersion(version, found))
    return outcomes


@dataclass(frozen=True)
class _Parsed:
    format: str | None  # the one the definition is read in
    definition: Definition
    as_sent: Any  # schemaDefinition as the body holds it
    name: str | None
    comment: str | None
    serialization: str | None
    validator: str | None


def _parsed(subject: Mapping[str, Any], body: Mapping[str, Any]) -> _Parsed:
    """``body`` read as a registration into ``subject``: every field checked now, as a
    registration refused later would refuse its whole batch."""
    serialization = _optional_text(body, "serialization")
    implied = format_of_serialization(serialization)
    if subject["format"] and implied and implied != subject["format"]:
        raise RegistryError(
            errors.INVALID_INPUT,
            f"serialization {serialization!r} does not fit the subject's format"
            f" {subject['format']}",
        )
    fmt = subject["format"] or implied
    definition = body.get("schemaDefinition")
    return _Parsed(
        fmt,
        parse_definition(fmt, definition),
        definition,
        _optional_text(body, "name"),
        _optional_text(body, "comment"),
        serialization,
        _optional_text(body, "validator"),
    )


async def insert_if_unchanged(
    db: Db, subject: Mapping[str, Any], checked: Sequence[NewVersion]
) -> list[Registered] | None:
    """``checked`` (in version order) written as the next versions of ``subject`` (the row as
    they were checked against); None if its mode, format or latest version is no longer
    that."""
    parsed = [version.parsed for version in checked]
    rows = await (
        await db.execute(_INSERT_IF_UNCHANGED, {
            "subject": subject["id"],
            "mode": subject["compatibility"],
            "format": subject["format"],
            "category": subject["protobuf_category"],
            "after": checked[0].version - 1 or None,
            "versions": [version.version for version in checked],
            "names": [p.name for p in parsed],
            "comments": [p.comment for p in parsed],
            "serializations": [p.serialization for p in parsed],
            "definitions": [json.dumps(p.as_sent) for p in parsed],
            "texts": [p.definition.canonical for p in parsed],
            "validators": [p.validator for p in parsed],
        })
    ).fetchall()  # fmt: skip
    if not rows:
        return None
    return [Registered(row["id"], row["version"], new=True) for row in rows]


def _in_use(what: str, error: ForeignKeyViolation) -> RegistryError:
    """Deleting what another table (the broker's event types) still refers to."""
    return RegistryError(
        errors.IN_USE,
        f"{what} is in use by {error.diag.table_name or 'another table'}: a broker event type's"
        " schemas are deleted with the event type (DELETE /event-types/{name} on the broker)",
    )


async def _find(
    db: Db,
    key: SubjectKey,
    *,
    lock: bool = False,
    with_version: tuple[int | None] | None = None,
) -> DictRow | None:
    """The subject row; ``with_version=(v,)`` adds version v's columns (None: latest)."""
    query = f"SELECT {SUBJECT_COLUMNS}"
    params: list[Any] = []
    if with_version is not None:
        # One round trip for the lookup the API serves most.
        query += (
            ", v.* FROM registry_subjects j LEFT JOIN LATERAL (SELECT s.id AS schema_id,"
            " s.version, s.name, s.comment, s.serialization, s.definition, s.validator"
            " FROM registry_schemas s WHERE s.subject_id = j.id"
            " AND (%s::int IS NULL OR s.version = %s) ORDER BY s.version DESC LIMIT 1) v"
            " ON true"
        )
        params += [with_version[0], with_version[0]]
    else:
        query += " FROM registry_subjects j"
    query += (
        " WHERE subject = %s"
        " AND (%s::text IS NULL OR tenant = %s) AND (%s::text IS NULL OR namespace = %s)"
        + (" FOR UPDATE" if lock else "")
    )
    params += [key.subject, key.tenant, key.tenant, key.namespace, key.namespace]
    rows = await (await db.execute(query, params)).fetchall()
    if len(rows) > 1:
        raise RegistryError(
            errors.INVALID_INPUT,
            f"subject {key.subject!r} exists in several tenants or namespaces:"
            " pass the tenant and namespace parameters",
        )
    return rows[0] if rows else None


async def _get(db: Db, key: SubjectKey, *, lock: bool = False) -> DictRow:
    row = await _find(db, key, lock=lock)
    if row is None:
        raise RegistryError(errors.SUBJECT_NOT_FOUND, f"subject {key.subject!r} not found")
    return row


async def _check_format_change(db: Db, row: Mapping[str, Any], fmt: str) -> None:
    count = await (
        await db.execute(
            "SELECT count(*) AS n FROM registry_schemas WHERE subject_id = %s", (row["id"],)
        )
    ).fetchone()
    if count and count["n"]:
        raise RegistryError(
            errors.INVALID_INPUT,
            f"subject {row['subject']!r} already has {row['format']} schemas;"
            " its format cannot change (use a new subject)",
        )


async def _version_row(db: Db, subject_id: int, version: int | None) -> DictRow | None:
    if version is None:
        query = "SELECT * FROM registry_schemas WHERE subject_id = %s ORDER BY version DESC LIMIT 1"
        return await (await db.execute(query, (subject_id,))).fetchone()
    query = "SELECT * FROM registry_schemas WHERE subject_id = %s AND version = %s"
    return await (await db.execute(query, (subject_id, version))).fetchone()


async def _history(
    db: Db, subject_id: int, *, latest_only: bool = False, until: int | None = None
) -> list[tuple[int, Any]]:
    """(version, definition), oldest first, up to version ``until`` if given; non-transitive
    checks need the latest alone. What versions share is one object, compared once."""
    rows = await (
        await db.execute(
            "SELECT version, canonical FROM registry_schemas WHERE subject_id = %s"
            " AND (%s::int IS NULL OR version <= %s)"
            " ORDER BY version DESC" + (" LIMIT 1" if latest_only else ""),
            (subject_id, until, until),
        )
    ).fetchall()
    rows.reverse()
    decoded = share_subtrees([json.loads(row["canonical"]) for row in rows])
    return [(row["version"], value) for row, value in zip(rows, decoded, strict=True)]


async def _check_history(db: Db, subject: Mapping[str, Any], mode: Mode, what: str) -> None:
    found = _history_violations(
        mode, await _history(db, subject["id"]), subject["format"], subject["protobuf_category"]
    )
    if found:
        raise errors.incompatible(
            found, f"the versions of {subject['subject']!r} already break {what} {mode.value}"
        )


def _version_missing(key: SubjectKey, version: int | None) -> RegistryError:
    if version is None:
        return RegistryError(errors.VERSION_NOT_FOUND, f"subject {key.subject!r} has no versions")
    return RegistryError(
        errors.VERSION_NOT_FOUND, f"subject {key.subject!r} has no version {version}"
    )


def _violations(
    mode: Mode, new: Any, history: Sequence[tuple[int, Any]], fmt: str | None, category: str
) -> list[Violation]:
    if mode is Mode.NONE or not history:
        return []
    checked = engine_format(fmt)
    if checked is None:
        return [
            Violation(
                "#",
                Rule.FORMAT_NOT_CHECKABLE,
                f"there are no compatibility rules for format {fmt or 'unset'}; set the subject's"
                " compatibility to NONE to register new versions",
            )
        ]
    labelled = [(f"version {v}", d) for v, d in history]
    if checked == "PB":
        return protobuf_check(mode, new, labelled, category)
    return check_labelled(mode, new, labelled, checked)


def _history_violations(
    mode: Mode, history: Sequence[tuple[int, Any]], fmt: str | None, category: str
) -> list[Violation]:
    """Each version against the ones before it, as if registered in order under ``mode``."""
    found: list[Violation] = []
    for index in range(1, len(history)):
        version, definition = history[index]
        found += [
            v.relabelled(f"version {version}: {v.message}")
            for v in _violations(mode, definition, history[:index], fmt, category)
        ]
    return found
