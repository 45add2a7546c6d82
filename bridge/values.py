"""Postgres values as the changeserver sends them (text output) -> JSON values, and the JSON
Schema of each type.

The changeserver renders every value with fixed session settings (``DateStyle=ISO``,
``TimeZone=UTC``, ``extra_float_digits=3``, hex bytea), so each conversion here is exact:

* ``boolean`` -> true/false; ``smallint``/``integer``/``bigint``/``oid`` -> JSON integers
  (JSON has no integer limit; the text keeps all 64 bits);
* ``real``/``double precision`` -> JSON numbers (shortest round-trip digits), except
  ``NaN``/``Infinity``/``-Infinity``, which JSON cannot spell: those stay strings;
* ``numeric`` and ``money`` -> strings: a JSON number is read as a double by most consumers,
  and a numeric's digits must survive;
* ``timestamptz`` -> RFC 3339 with its offset (``2026-11-23T02:37:49.5+00:00``), ``timestamp``
  -> the same without one (it has none); ``infinity`` stays as Postgres spells it;
* ``bytea`` -> base64 of the bytes; ``json``/``jsonb`` -> the JSON value itself;
* everything else (text, uuid, date, time, interval, enums, arrays, ...) -> Postgres's text
  output, which reads back into the same value.

NULL is null everywhere; a nullable column's schema admits null.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Any

from changebroker import pg_types

_NON_FINITE = frozenset({"NaN", "Infinity", "-Infinity"})
_SHORT_OFFSET = re.compile(r"[+-]\d\d$")


def _float(text: str) -> float | str:
    return text if text in _NON_FINITE else float(text)


def _timestamptz(text: str) -> str:
    # "2026-11-23 02:37:49.5+00" -> "2026-11-23T02:37:49.5+00:00" (RFC 3339 wants hh:mm).
    text = text.replace(" ", "T", 1)
    return text + ":00" if _SHORT_OFFSET.search(text) else text


def _bytea(text: str) -> str:
    return base64.b64encode(bytes.fromhex(text[2:])).decode("ascii")


def _bool(text: str) -> bool:
    # The changeserver spells bools as transicator does ("true"/"false"); Postgres's own
    # text output, which table readers such as the snapshot use, is "t"/"f".
    return text in ("true", "t")


_CONVERT: dict[pg_types.JsonValue, Callable[[str], Any]] = {
    "bool": _bool,
    "int": int,
    "float": _float,
    "timestamptz": _timestamptz,
    "timestamp": lambda text: text.replace(" ", "T", 1),
    "base64": _bytea,
    "json": json.loads,
}
# Per OID: the text of every other type is its JSON value.
_BY_OID = {t.oid: _CONVERT[t.json] for t in pg_types.TYPES if t.json in _CONVERT}


def to_json(text: str | None, oid: int) -> Any:
    """The JSON value of a column the changeserver sent as ``{"value": text, "type": oid}``."""
    if text is None:
        return None
    convert = _BY_OID.get(oid)
    return text if convert is None else convert(text)


# How a property's description starts once its column is no longer the table's (dropped,
# or renamed away): the property stays declared, as forward compatibility wants, and the
# replay leaves the column out.
DROPPED = "dropped: "
# The annotation keyword naming a property's Postgres type (``format_type``, or ``type <oid>``
# when the change's type was not the catalog's): what the replay reads it by.
PG_TYPE = "x-pg-type"


def dropped(schema: dict[str, Any]) -> dict[str, Any]:
    """A column's property schema once the column is gone from the table."""
    description = str(schema.get("description", ""))
    if description.startswith(DROPPED):
        return schema
    return {**schema, "description": DROPPED + description}


def column_schema(oid: int, type_name: str, nullable: bool) -> dict[str, Any]:
    """A column's property schema: the Postgres type in ``PG_TYPE``, and for people in the
    description (a retype that keeps the JSON type is then a PATCH version, visible in the
    schema history)."""
    pg_type = pg_types.of(oid)
    description = f"{type_name}, {pg_type.note}" if pg_type.note else type_name
    schema: dict[str, Any] = {"description": description, PG_TYPE: type_name}
    types = pg_type.schema
    if types is not None:
        schema["type"] = (
            [*types, "null"] if nullable else (types[0] if len(types) == 1 else list(types))
        )
    return schema
