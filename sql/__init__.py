"""Versioned DDL: ``sql/<component>/NNN_name.sql``, applied by ``changebroker.pg.migrate``."""

from pathlib import Path

DIR = Path(__file__).resolve().parent
