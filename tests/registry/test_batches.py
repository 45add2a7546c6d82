"""Registrations of one subject that arrive together: checked in order, written as one batch,
and checked again under the subject's lock when the subject changed meanwhile."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg.rows import dict_row

from changebroker import pg
from changebroker.registry import errors
from changebroker.registry.errors import RegistryError
from changebroker.registry.store import (
    NewVersion,
    Registered,
    Store,
    SubjectKey,
    check_registrations,
    insert_if_unchanged,
)

T = TypeVar("T")


@pytest.fixture(scope="module")
def dsn(registry_dsn: str) -> str:
    """The module's registry database, migrated as a registry's start migrates it."""
    pg.migrate(registry_dsn, "registry")
    return registry_dsn


def body(definition: Any) -> dict[str, Any]:
    return {"serialization": "json", "schemaDefinition": definition}


def order(title: str, id_type: str = "string") -> dict[str, Any]:
    # Under BACKWARD, a new title is compatible; a new type of "id" is not.
    return {"type": "object", "properties": {"id": {"type": id_type}}, "title": title}


def with_store(dsn: str, scenario: Callable[[Store], Awaitable[T]]) -> T:
    async def run() -> T:
        store = Store(dsn, pool_size=2)
        await store.open()
        try:
            return await scenario(store)
        finally:
            await store.close()

    return asyncio.run(run())


def versions(dsn: str, subject: str) -> list[tuple[int, str, Any]]:
    """(version, id, the transaction's start) of each of the subject's versions."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT s.version, s.id, s.created_time FROM registry_schemas s"
            " JOIN registry_subjects j ON j.id = s.subject_id WHERE j.subject = %s"
            " ORDER BY s.version",
            (subject,),
        ).fetchall()
    return [(version, str(schema_id), created) for version, schema_id, created in rows]


def test_registrations_arriving_together_are_checked_in_order_and_written_at_once(dsn: str) -> None:
    subject = "batched"
    bodies = [
        body(order("second")),
        body(order("incompatible", id_type="integer")),  # against "second", not "first"
        body(order("third")),
        body({"type": 12}),  # not a JSON Schema
        body(order("second")),  # the same as the first of the batch
        body(order("first")),  # the same as version 1
    ]

    async def scenario(store: Store) -> tuple[str, list[str | RegistryError]]:
        first = await store.register(SubjectKey(subject), body(order("first")))
        answers = await asyncio.gather(
            *(store.register(SubjectKey(subject), b) for b in bodies), return_exceptions=True
        )
        return first, [a if isinstance(a, RegistryError) else str(a) for a in answers]

    first, answers = with_store(dsn, scenario)

    stored = versions(dsn, subject)
    assert [(version, schema_id) for version, schema_id, _ in stored] == [
        (1, first),
        (2, answers[0]),
        (3, answers[2]),
    ]
    assert stored[1][2] == stored[2][2], "versions 2 and 3 were written in one transaction"
    incompatible, invalid = answers[1], answers[3]
    assert isinstance(incompatible, RegistryError) and incompatible.code == errors.INCOMPATIBLE
    assert isinstance(invalid, RegistryError) and invalid.code == errors.INVALID_INPUT
    assert answers[4] == answers[0]
    assert answers[5] == first


def test_a_registration_cancelled_while_it_waits_leaves_the_batch_to_the_others(dsn: str) -> None:
    subject = "cancelled-while-waiting"

    async def scenario(store: Store) -> list[str]:
        await store.register(SubjectKey(subject), body(order("first")))
        abandoned = asyncio.create_task(store.register(SubjectKey(subject), body(order("gone"))))
        await asyncio.sleep(0)  # one turn of the loop: it is queued, and waits for its batch
        abandoned.cancel()
        kept = [store.register(SubjectKey(subject), body(order(f"kept {i}"))) for i in range(3)]
        ids = await asyncio.gather(*kept)
        assert abandoned.cancelled()
        return ids

    ids = with_store(dsn, scenario)

    stored = versions(dsn, subject)
    assert ids == [schema_id for _, schema_id, _ in stored[-3:]]
    assert [version for version, _, _ in stored] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("change", ["a version written", "the mode changed"])
def test_a_checked_version_is_not_written_over_a_change_since_its_check(
    dsn: str, change: str
) -> None:
    subject = f"changed after the check: {change}"

    async def scenario(store: Store) -> list[Registered] | None:
        await store.register(SubjectKey(subject), body(order("first")))
        async with store.pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute("SELECT * FROM registry_subjects WHERE subject = %s", (subject,))
            row = await cur.fetchone()
            assert row is not None
            [checked] = await check_registrations(
                conn, SubjectKey(subject), row, [body(order("second"))]
            )
            assert isinstance(checked, NewVersion) and checked.version == 2
            if change == "a version written":
                await store.register(SubjectKey(subject), body(order("another")))
            else:
                await store.set_compatibility(SubjectKey(subject), "FORWARD")
            return await insert_if_unchanged(conn, row, [checked])

    assert with_store(dsn, scenario) is None
    expected = 2 if change == "a version written" else 1
    assert [version for version, _, _ in versions(dsn, subject)] == list(range(1, expected + 1))
