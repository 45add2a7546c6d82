"""Versioned DDL: ``sql/<component>/NNN_name.sql``, applied by ``changebroker.pg.migrate``.

The files are package data, read through importlib.resources, so an installed wheel reads
them as a checkout does."""

from importlib import resources
from importlib.resources.abc import Traversable

DIR: Traversable = resources.files(__name__)
