"""Several processes (broker workers, say) migrating one fresh database at once; the tables
the migrations (package data) create."""

from __future__ import annotations

import threading

from changebroker import pg
from changebroker.bridge.bridge import own_tables


def test_concurrent_migrations_of_a_fresh_database_all_succeed(pg_server_dsn: str) -> None:
    with pg.scratch_database(pg_server_dsn, "t_migrate") as dsn:
        start = threading.Barrier(4)
        failures: list[BaseException] = []

        def migrate() -> None:
            start.wait()
            try:
                for component in ("registry", "broker"):
                    pg.migrate(dsn, component)
            except BaseException as error:  # reported by the assertion below
                failures.append(error)

        threads = [threading.Thread(target=migrate) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert failures == []
        with pg.connect(dsn) as conn:
            applied = conn.execute(
                "SELECT component, count(*) FROM changebroker_migrations GROUP BY component"
            ).fetchall()
        assert dict(applied) == {
            "registry": len(pg.migrations("registry")),
            "broker": len(pg.migrations("broker")),
        }


def test_the_bridge_never_publishes_a_table_of_any_component_s_migrations(
    pg_server_dsn: str,
) -> None:
    with pg.scratch_database(pg_server_dsn, "t_own_tables") as dsn:
        # The broker's migrations move its schemas into the registry's tables: registry first.
        for component in sorted(pg.components(), key=lambda name: name != "registry"):
            pg.migrate(dsn, component)
        with pg.connect(dsn) as conn:
            rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            created = {f"public.{name}" for (name,) in rows}
    assert {"public.changebroker_outbox", "public.changebroker_watermarks"} <= created
    assert created <= own_tables("public.changebroker_outbox")
