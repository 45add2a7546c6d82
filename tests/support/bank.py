"""A small bank for workloads that change several rows of two tables per transaction:
accounts 1 to 50 and the transfers between them, every row selected for the bridge."""

from __future__ import annotations

import random
from typing import Any

import psycopg

TABLES = """
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, note text,
    _change_selector text DEFAULT 'bridge');
CREATE TABLE transfers (id bigserial PRIMARY KEY, src int, dst int, amount bigint,
    _change_selector text DEFAULT 'bridge');
ALTER TABLE accounts REPLICA IDENTITY FULL;
ALTER TABLE transfers REPLICA IDENTITY FULL;
INSERT INTO accounts SELECT i, 1000, NULL FROM generate_series(1, 50) i;
"""


def transfer(conn: psycopg.Connection[Any], rng: random.Random, accounts: range) -> None:
    """Move an amount between two of ``accounts`` and record it, in the open transaction."""
    src, dst = rng.sample(accounts, 2)
    amount = rng.randint(1, 50)
    conn.execute("UPDATE accounts SET balance = balance - %s WHERE id = %s", (amount, src))
    conn.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", (amount, dst))
    conn.execute("INSERT INTO transfers (src, dst, amount) VALUES (%s, %s, %s)", (src, dst, amount))
