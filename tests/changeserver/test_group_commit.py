"""Group commit: transactions that arrive soon after a change log write wait for the next,
together, so they share one SQLite commit and its fsync (``--group-commit-ms``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from tests.support.changeserver import MakeServer


def test_transactions_soon_after_a_write_share_the_next(make_server: MakeServer) -> None:
    # Wide enough that three commits made right after the first write all fall inside it.
    cs = make_server(group_commit_ms=5_000)
    changelog = cs.server.changelog
    writes: list[int] = []
    write: Callable[..., None] = changelog.write

    def counted(records: list[Any], commits: list[Any]) -> None:
        write(records, commits)
        writes.append(len(commits))

    changelog.write = counted  # type: ignore[method-assign]
    cs.sql("INSERT INTO items VALUES (1, 'first', 'a')")
    first = cs.wait_for(1, scope="a")["changes"][0]["sequence"]
    with psycopg.connect(cs.dsn, autocommit=True) as conn:
        for i in (2, 3, 4):  # three transactions
            conn.execute("INSERT INTO items VALUES (%s, 'next', 'a')", (i,))
    later = cs.wait_for(3, scope="a", since=first)["changes"]

    assert [c["newRow"]["id"]["value"] for c in later] == ["2", "3", "4"]
    assert len({c["txid"] for c in later}) == 3
    assert writes == [1, 3]
