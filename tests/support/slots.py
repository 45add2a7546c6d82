"""Replication slots taken away behind a changeserver's back, as an operator or Postgres would."""

from __future__ import annotations

import psycopg

from changebroker.stack.processes import wait_until


def drop_behind_its_back(dsn: str, slot: str) -> None:
    """End the slot's walsender and drop the slot before the changeserver reconnects."""

    def dropped() -> bool:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
                " WHERE slot_name = %s AND active_pid IS NOT NULL",
                (slot,),
            )
            try:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            except psycopg.errors.ObjectInUse:
                return False  # it reconnected first: end it again
            return True

    wait_until(dropped, timeout=30, what=f"slot {slot} dropped")
